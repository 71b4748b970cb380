"""Issue 39, round five: a key line read for what it means (credentials refused, a reload that failed, a
configuration rejected at start, a name server that does not answer) and a symptom followed to the object
behind it (the cluster DNS pods, the APIService behind an aggregated API). Names appear in no case."""

from __future__ import annotations

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.investigation.diagnosis import rank_findings
from diagnostics.agent.request.subject import AlertContext, subject_from_labels
from tests.support.findings import findings_of


@pytest.mark.parametrize(
    ("line", "kind", "needles"),
    [
        (
            'psql: error: connection to server at "vault-db" failed: FATAL:  password authentication failed '
            'for user "miller"',
            "credentials_rejected",
            ["miller", "every attempt"],
        ),
        ("ERROR 1045: Access denied for user 'reader'@'10.0.0.7'", "credentials_rejected", ["reader"]),
        (
            'level=error msg="Error reloading config" err="parse error: line 7: unknown key"',
            "config_reload_failed",
            ["previous configuration", "line 7"],
        ),
        (
            "critical envoy main error initializing configuration 'boot.json': unknown field",
            "config_rejected",
            ["boot.json"],
        ),
        (
            'err="dial tcp: lookup ledger.bank.svc on 10.32.0.10:53: read udp 10.1.1.1:5->10.32.0.10:53: '
            'i/o timeout"',
            "dns_server_unanswered",
            ["10.32.0.10:53", "does not answer"],
        ),
    ],
)
def test_a_key_line_is_read_for_what_it_means(line, kind, needles):
    found, _ = findings_of(
        f"starting\n{line}\n", tool="fetch_pod_logs", params={"pod_name": "m-1", "namespace": "mill"}
    )
    match = [f for f in found if f.kind == kind]
    assert match, [f.summary for f in found]
    assert all(n in match[0].summary for n in needles), match[0].summary


def test_a_reload_error_over_two_lines_is_quoted_whole():
    found, _ = findings_of(
        'msg="Error reloading config" err="yaml: unmarshal errors:\n  line 41: field routez not found"\n',
        tool="fetch_pod_logs",
        params={"pod_name": "m-1", "namespace": "mill"},
    )
    reload = next(f for f in found if f.kind == "config_reload_failed")
    assert "line 41" in reload.summary, reload.summary


UNABLE = (
    "the HPA was unable to compute the replica count: unable to fetch metrics from resource metrics API: "
    "the server is currently unable to handle the request (get pods.metrics.k8s.io)"
)


def _read(text: str, *, tool: str = "kubectl_describe", params=None, state):  # type: ignore[no-untyped-def]
    """As the runner does: the output is recorded, then analyzed."""
    out = ToolOutput(tool, params or {}, text)
    state.record(out)
    return analyze(out, state), state


def _state(labels: dict[str, str]) -> AnalysisState:
    return AnalysisState(AlertContext(subject=subject_from_labels(labels)))


def test_a_dns_server_that_does_not_answer_leads_to_the_cluster_dns_pods_and_names_them():
    state = _state({"namespace": "mill", "deployment": "grinder"})
    logs, _ = _read(
        'err="lookup flour.mill.svc on 10.32.0.10:53: read udp 1.2.3.4:9->10.32.0.10:53: i/o timeout"\n',
        tool="fetch_pod_logs",
        params={"pod_name": "grinder-1", "namespace": "mill"},
        state=state,
    )
    assert any(lead.obj.namespace == "kube-system" for lead in state.leads)
    listing, _ = _read(
        "NAME                  READY   STATUS             RESTARTS   AGE\n"
        "coredns-77f-aa1       0/1     CrashLoopBackOff   7          9m\n"
        "kube-proxy-zz         1/1     Running            0          9d\n",
        tool="kubectl_get_by_kind_in_namespace",
        params={"kind": "pod", "namespace": "kube-system"},
        state=state,
    )
    top = rank_findings([*logs, *listing])[0]
    assert top.kind == "cluster_dns_down", top
    assert "coredns-77f-aa1" in top.summary and "10.32.0.10:53" in top.summary
    assert "kube-proxy-zz" not in top.summary


def test_an_unreadable_aggregated_api_is_followed_to_the_apiservice_and_its_pods():
    state = _state({"namespace": "shop", "horizontalpodautoscaler": "cart"})
    hpa, _ = _read(
        f"""Name:         cart
Namespace:    shop
Conditions:
  Type           Status  Reason                   Message
  ----           ------  ------                   -------
  ScalingActive  False   FailedGetResourceMetric  {UNABLE}
""",
        params={"kind": "horizontalpodautoscaler", "name": "cart", "namespace": "shop"},
        state=state,
    )
    assert any(lead.obj.kind == "apiservice" for lead in state.leads)
    apis, _ = _read(
        "NAME                     SERVICE                  AVAILABLE                  AGE\n"
        "v1.apps                  Local                    True                       9d\n"
        "v1beta1.metrics.k8s.io   observe/metrics-server   False (MissingEndpoints)   9d\n",
        tool="kubectl_get_by_kind_in_cluster",
        params={"kind": "apiservice"},
        state=state,
    )
    assert any(f.kind == "apiservice_unavailable" for f in apis)
    pods, _ = _read(
        "NAME                       READY   STATUS    RESTARTS   AGE\n"
        "metrics-server-5c-q1       0/1     Error     4          3m\n",
        tool="kubectl_get_by_kind_in_namespace",
        params={"kind": "pod", "namespace": "observe"},
        state=state,
    )
    top = rank_findings([*hpa, *apis, *pods])[0]
    assert top.kind == "aggregated_api_down", top
    assert "metrics-server-5c-q1" in top.summary and "(MissingEndpoints)" in top.summary
