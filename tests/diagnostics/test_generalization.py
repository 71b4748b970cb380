"""Diagnosis that generalizes: the dev/held-out split, subjects from any alert's labels, probes planned
by the alert's kind, analyzers that name the decisive fact, and a clean report that says what it checked.

The analyzer inputs here use names that appear in no case, so a rule keyed to a case's entities fails.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from urllib.parse import quote_plus

import pytest
from django.conf import settings
from django.core.management import call_command

from diagnostics.agent.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.agent.subject import AlertContext, alert_queries, from_alertmanager, from_investigation
from diagnostics.evaluation.cases import DEV, HELD_OUT, discover_cases, split_of
from diagnostics.evaluation.replay import evaluate
from diagnostics.toolsets.replay import ReplayEnvironment

EVAL = Path(settings.EVAL_DIR)
HOLMES = EVAL / "holmesgpt" / "cases"
HANDWRITTEN = EVAL / "handwritten" / "cases"
# Development cases whose answer is not in their recordings (the original ran against a live
# cluster): the NetworkPolicy and the HPA were never recorded, so no agent can see them in replay.
NOT_IN_RECORDINGS = {
    "test_ask_holmes/42_dns_issues_result_new_tools",
    "test_ask_holmes/64_keda_vs_hpa_confusion",
}


def findings_of(text: str, *, tool: str = "kubectl_describe", params=None, state=None):  # type: ignore[no-untyped-def]
    state = state or AnalysisState(AlertContext())
    return analyze(ToolOutput(tool, params or {}, text), state), state


def kinds(findings) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.kind for f in findings}


# -- the split ------------------------------------------------------------------------------------


def test_the_split_is_a_fixed_hash_of_the_name_and_holds_out_about_a_third():
    names = [f"suite/{i:03d}_case" for i in range(300)]
    splits = [split_of(n) for n in names]
    assert splits == [split_of(n) for n in names]
    assert set(splits) == {DEV, HELD_OUT}
    assert 0.25 < splits.count(HELD_OUT) / len(names) < 0.42
    for case in discover_cases(HOLMES):
        assert case.split == split_of(case.name)


def test_evaluate_runs_one_split_when_asked_and_reports_both():
    held = evaluate([HOLMES, HANDWRITTEN], only=HELD_OUT)
    assert held and {r.split for r in held} == {HELD_OUT}
    out = io.StringIO()
    call_command(
        "diagnose_replay",
        "--cases",
        str(HOLMES),
        "--cases",
        str(HANDWRITTEN),
        "--case",
        "hw0",
        "--no-llm",
        stdout=out,
        stderr=io.StringIO(),
    )
    text = out.getvalue()
    lines = [line for line in text.splitlines() if "pass rate" in line]
    assert [line.split()[0] for line in lines] == ["dev", "held-out", "all"], text
    assert all("best@1" in line and "avg@1" in line for line in lines)


def test_every_development_case_passes_analyzers_only():
    results = evaluate([HOLMES, HANDWRITTEN], only=DEV)
    failed = {r.case for r in results if not r.passed}
    assert failed <= NOT_IN_RECORDINGS, failed
    assert sum(r.passed for r in results) >= len(results) - len(NOT_IN_RECORDINGS)


def test_the_hand_written_cases_say_so():
    cases = discover_cases(HANDWRITTEN)
    assert len(cases) >= 10
    for case in cases:
        assert "hand-written" in (case.path / "test_case.yaml").read_text()


# -- subjects from any alert ----------------------------------------------------------------------


def test_an_alert_named_only_by_alertname_and_labels_gets_its_subject():
    issue = {
        "labels": {
            "alertname": "KubeContainerWaiting",
            "namespace": "billing",
            "pod": "invoicer-55f-abcde",
            "container": "main",
        }
    }
    alert = from_investigation({"title": "KubeContainerWaiting", "subject": {"name": None}}, issue)
    assert (alert.subject.kind, alert.subject.name, alert.subject.namespace) == (
        "pod",
        "invoicer-55f-abcde",
        "billing",
    )
    assert "main" in alert.subject.names
    job = from_alertmanager({"labels": {"alertname": "KubeJobFailed", "job_name": "etl-7", "namespace": "d"}})
    assert (job.subject.kind, job.subject.name) == ("job", "etl-7")
    assert "job" in job.topics
    probe = from_alertmanager({"labels": {"alertname": "ProbeFailed", "instance": "ledger.money.svc:9443"}})
    assert probe.subject.name == "ledger" and "network" in probe.topics
    assert "cpu" in from_alertmanager({"labels": {"alertname": "CPUThrottlingHigh"}}).topics
    assert "quota" in from_alertmanager({"labels": {"alertname": "KubeMemoryOvercommit"}}).topics


def test_the_alert_expression_comes_from_its_generator_link():
    expr = 'sum(rate(x_total{a="b"}[5m])) > 1'
    url = "http://prom:9090/graph?g0.expr=" + quote_plus(expr) + "&g0.tab=1"
    assert alert_queries(url, "not a url", "http://prom/graph?g0.tab=1") == [expr]
    alert = from_alertmanager({"labels": {"alertname": "X"}, "generatorURL": url})
    assert alert.queries == [expr]


# -- analyzers that name the decisive fact ---------------------------------------------------------


@pytest.mark.parametrize(
    ("log", "kind", "needles"),
    [
        (
            "start\n/opt/run/etl.sh: line 31: syntax error near unexpected token `done'\n",
            "shell_syntax_error",
            ["/opt/run/etl.sh", "line 31", "`done'"],
        ),
        (
            "bash: line 2: unexpected EOF while looking for matching `''\n",
            "shell_syntax_error",
            ["line 2", "unexpected EOF"],
        ),
        ('sh: 4: Syntax error: end of file unexpected (expecting "then")', "shell_syntax_error", ["line 4"]),
        ("/bin/sh: 1: nodee: not found", "command_not_found", ["`nodee`", "did you mean `node`"]),
        ("bash: line 1: frobnicate: command not found", "command_not_found", ["`frobnicate`", "127"]),
    ],
)
def test_the_failing_command_or_line_is_named(log, kind, needles):
    found, _ = findings_of(log, tool="fetch_pod_logs", params={"pod_name": "p-1", "namespace": "n"})
    match = [f for f in found if f.kind == kind]
    assert match, [f.summary for f in found]
    assert all(n in match[0].summary for n in needles), match[0].summary
    if "frobnicate" in log:  # not close to any well-known program: no guess
        assert "did you mean" not in match[0].summary


def test_an_exec_error_of_the_runtime_names_the_command():
    text = (
        "Name: w-1\nNamespace: n\nContainers:\n  c:\n    Last State:     Terminated\n"
        '      Message:      exec: "uvicron": executable file not found in $PATH: unknown\n'
    )
    found, _ = findings_of(text, params={"kind": "pod", "name": "w-1", "namespace": "n"})
    exec_failed = [f for f in found if f.kind == "exec_failed"]
    assert exec_failed and "`uvicron`" in exec_failed[0].summary and "`uvicorn`" in exec_failed[0].summary


def test_an_exceeded_quota_and_a_full_quota_are_named():
    event = (
        'Warning  FailedCreate  1m  replicaset-controller  Error creating: pods "a-1" is forbidden: exceeded '
        "quota: team-q, requested: requests.cpu=500m, used: requests.cpu=4, limited: requests.cpu=4"
    )
    found, _ = findings_of(event, params={"kind": "replicaset", "name": "a", "namespace": "t"})
    quota = [f for f in found if f.kind == "quota_exceeded"]
    assert quota and "team-q" in quota[0].summary and "requests.cpu=4" in quota[0].summary
    table = (
        "NAME     AGE   REQUEST                LIMIT\nteam-q   3d    requests.cpu: 4/4   limits.cpu: 2/8\n"
    )
    found, _ = findings_of(
        table, tool="kubectl_get_by_kind_in_namespace", params={"kind": "resourcequota", "namespace": "t"}
    )
    full = [f for f in found if f.kind == "quota_full"]
    assert len(full) == 1 and "requests.cpu" in full[0].summary and "limits.cpu" not in full[0].summary


def test_a_node_whose_requests_fill_its_allocatable_is_named():
    node = """Name:               n-7
Allocatable:
  cpu:                8
Allocated resources:
  Resource           Requests      Limits
  --------           --------      ------
  cpu                7600m (95%)   12 (150%)
  memory             2Gi (20%)     4Gi (40%)
"""
    found, _ = findings_of(node, params={"kind": "node", "name": "n-7"})
    over = [f for f in found if f.kind == "node_overcommitted"]
    assert len(over) == 1 and "n-7" in over[0].summary and "cpu" in over[0].summary


def _pod(name: str, cpu_limit: str) -> str:
    return (
        f"Name:         {name}\nNamespace:    n\nContainers:\n  app:\n    Image:  x\n    Limits:\n"
        f"      cpu:     {cpu_limit}\n    Ready:  True\n"
    )


def test_throttling_is_tied_to_the_cpu_limit_whichever_comes_first():
    query = (
        "sum(increase(container_cpu_cfs_throttled_periods_total[5m]))"
        " / sum(increase(container_cpu_cfs_periods_total[5m]))"
    )
    result = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": {"pod": "q-1", "container": "app"}, "value": [0, "0.64"]}],
            },
        }
    )
    for order in ("metric first", "spec first"):
        state = AnalysisState(AlertContext())
        outputs = [
            ("execute_prometheus_instant_query", {"query": query}, result),
            ("kubectl_describe", {"kind": "pod", "name": "q-1", "namespace": "n"}, _pod("q-1", "350m")),
        ]
        found = []
        for tool, params, text in outputs if order == "metric first" else outputs[::-1]:
            found += analyze(ToolOutput(tool, params, text), state)
        at_limit = [f for f in found if f.kind == "cpu_throttled_at_limit"]
        assert len(at_limit) == 1 and "350m" in at_limit[0].summary and "64%" in at_limit[0].summary


def test_cpu_use_at_the_limit_in_kubectl_top_is_throttling():
    state = AnalysisState(AlertContext())
    analyze(ToolOutput("kubectl_describe", {"kind": "pod", "name": "z-9"}, _pod("z-9", "250m")), state)
    top = "NAME   CPU(cores)   MEMORY(bytes)\nz-9    249m         80Mi\nother  10m          5Mi\n"
    found = analyze(ToolOutput("kubectl_top_pods", {}, top), state)
    assert kinds(found) >= {"cpu_at_limit"} and "250m" in found[0].summary


def test_the_slow_endpoint_behind_a_latency_query_is_named():
    query = "histogram_quantile(0.95, sum by (le, handler) (rate(http_server_duration_seconds_bucket[5m])))"
    result = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {"metric": {"service": "s", "handler": "/fast"}, "value": [0, "0.02"]},
                    {"metric": {"service": "s", "handler": "/v2/export"}, "value": [0, "4.5"]},
                ],
            },
        }
    )
    found, _ = findings_of(result, tool="execute_prometheus_instant_query", params={"query": query})
    slow = [f for f in found if f.kind == "slow_endpoint"]
    assert len(slow) == 1 and "/v2/export" in slow[0].summary and "p95" in slow[0].summary


def test_a_policy_that_isolates_the_pods_is_named_with_the_service_it_blocks():
    state = AnalysisState(AlertContext())
    service = (
        "Name:              api\nNamespace:         m\nSelector:          app=api\n"
        "Type:              ClusterIP\n"
        "IP:                10.0.0.1\nEndpoints:         10.1.1.1:80\n"
    )
    analyze(
        ToolOutput("kubectl_describe", {"kind": "service", "name": "api", "namespace": "m"}, service), state
    )
    policy = """Name:         lock-down
Namespace:    m
Spec:
  PodSelector:     app=api
  Allowing ingress traffic:
    <none> (Selected pods are isolated for ingress connectivity)
  Not affecting egress traffic
  Policy Types: Ingress
"""
    found = analyze(
        ToolOutput("kubectl_describe", {"kind": "networkpolicy", "name": "lock-down"}, policy), state
    )
    deny = [f for f in found if f.kind == "network_policy_denies_ingress"]
    assert deny and "lock-down" in deny[0].summary and "service api" in deny[0].summary
    listing = "NAME        POD-SELECTOR   AGE\nlock-down   app=api        1d\nother       <none>         2d\n"
    analyze(
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "networkpolicy", "namespace": "m"}, listing),
        state,
    )
    assert {lead.obj.name for lead in state.leads if lead.obj.kind == "networkpolicy"} >= {
        "lock-down",
        "other",
    }


def test_a_selector_that_matches_no_pod_names_the_differing_label():
    state = AnalysisState(AlertContext())
    service = (
        "Name:              web\nNamespace:         k\nSelector:          app=web,track=stable\n"
        "Type:              ClusterIP\nIP:                10.0.0.2\nEndpoints:         <none>\n"
    )
    found = analyze(ToolOutput("kubectl_describe", {"kind": "service", "name": "web"}, service), state)
    assert "service_no_endpoints" in kinds(found)
    pods = (
        "NAME     READY   STATUS    RESTARTS   AGE   LABELS\n"
        "web-1    1/1     Running   0          1d    app=web,track=canary\n"
    )
    found = analyze(
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "k"}, pods), state
    )
    mismatch = [f for f in found if f.kind == "service_selector_mismatch"]
    assert mismatch and "track=stable" in mismatch[0].summary and "track=canary" in mismatch[0].summary


def test_a_host_name_that_is_no_service_is_named():
    state = AnalysisState(AlertContext())
    log = 'OperationalError: could not translate host name "cache-main" to address: Name or service not known'
    found = analyze(ToolOutput("fetch_pod_logs", {"pod_name": "c-1", "namespace": "w"}, log), state)
    assert "dns_failure" in kinds(found)
    assert any(lead.obj.kind == "service" and lead.obj.namespace == "w" for lead in state.leads)
    services = (
        "NAME        TYPE        CLUSTER-IP   EXTERNAL-IP   PORT(S)    AGE\n"
        "cache-v2    ClusterIP   10.0.0.9     <none>        6379/TCP   1d\n"
    )
    found = analyze(
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "service", "namespace": "w"}, services), state
    )
    unknown = [f for f in found if f.kind == "service_name_unknown"]
    assert unknown and "cache-main" in unknown[0].summary and "cache-v2" in unknown[0].summary


# -- a clean report names its probes ---------------------------------------------------------------


def _record(folder: Path, name: str, tool: str, match: dict[str, str], body: str) -> None:
    header = {"toolset_name": "kubernetes/core", "tool_name": tool, "match_params": match}
    (folder / name).write_text(f"{json.dumps(header)}\n{json.dumps({'status': 'success'})}\n{body}\n")


def test_no_problem_found_only_with_the_probes_that_came_back_clean(tmp_path):
    _record(
        tmp_path,
        "describe.txt",
        "kubectl_describe",
        {"kind": "pod", "name": "calm-1", "namespace": "q"},
        "Name:         calm-1\nNamespace:    q\nStatus:       Running\nContainers:\n  c:\n"
        "    State:  Running\n"
        "    Ready:          True\n    Restart Count:  0\n",
    )
    alert = from_alertmanager({"labels": {"alertname": "KubePodNotReady", "pod": "calm-1", "namespace": "q"}})
    outcome = investigate(
        alert=alert,
        environment=ReplayEnvironment({"case_dir": str(tmp_path)}),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )
    assert outcome.diagnosis.startswith("No problem found")
    assert "Checked, and clean: kubectl_describe(kind=pod, name=calm-1, namespace=q)" in outcome.diagnosis
    assert len(outcome.tool_calls) > 3  # it kept probing (logs, events, ...) before calling it clean


def _otlp(spans: list[tuple[str, str, str, str, int, int, dict[str, str]]]) -> str:
    batches: dict[str, list[dict[str, object]]] = {}
    for service, span_id, parent, name, start_ms, end_ms, attributes in spans:
        span: dict[str, object] = {
            "spanId": span_id,
            "name": name,
            "startTimeUnixNano": str(start_ms * 1_000_000),
            "endTimeUnixNano": str(end_ms * 1_000_000),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
        }
        if parent:
            span["parentSpanId"] = parent
        batches.setdefault(service, []).append(span)
    return json.dumps(
        {
            "batches": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                    "scopeSpans": [{"spans": spans}],
                }
                for service, spans in batches.items()
            ]
        }
    )


def test_a_trace_in_otlp_json_names_the_span_that_takes_the_time():
    trace = _otlp(
        [
            ("gateway", "a", "", "POST /pay", 0, 2600, {}),
            ("gateway", "b", "a", "call ledger", 10, 2550, {}),
            ("ledger", "c", "b", "UPDATE balances", 20, 2500, {"db.statement": 'UPDATE "balances" SET x=1'}),
        ]
    )
    found, _ = findings_of(trace, tool="fetch_tempo_trace_by_id", params={"trace_id": "t1"})
    slow = [f for f in found if f.kind == "slow_database_query"]
    assert slow and "ledger" in slow[0].summary and "UPDATE balances" in slow[0].summary
    assert "2480 ms of the 2600 ms request POST /pay" in slow[0].summary


def test_tempo_search_json_leads_to_the_slowest_traces():
    listing = json.dumps(
        {
            "traces": [
                {"traceID": "aa1", "rootTraceName": "GET /a", "durationMs": 3100},
                {"traceID": "bb2", "rootTraceName": "GET /b", "durationMs": 40},
            ]
        }
    )
    found, state = findings_of(listing, tool="fetch_tempo_traces")
    assert "slow_traces" in kinds(found)
    assert [lead.obj.name for lead in state.leads if lead.obj.kind == "trace"] == ["aa1"]


def test_a_metrics_scrape_histogram_gives_each_routes_quantile():
    lines = []
    for route, counts in (("/orders/{id}", (0, 0, 10, 100)), ("/ping", (100, 100, 100, 100))):
        for bound, count in zip(("0.1", "1", "5", "+Inf"), counts, strict=True):
            lines.append(f'app_request_duration_seconds_bucket{{route="{route}",le="{bound}"}} {count}')
    found, _ = findings_of("\n".join(lines), tool="fetch_service_metrics", params={"service": "orders"})
    slow = [f for f in found if f.kind == "slow_endpoint"]
    # rank 99 of 100 falls in the +Inf bucket: the quantile is the highest finite bound, 5 s
    assert len(slow) == 1 and "/orders/{id}" in slow[0].summary and "5.00 s" in slow[0].summary
    assert "orders" in slow[0].summary and "other endpoints are fast: /ping" in slow[0].summary


def test_the_prometheus_toolsets_rendering_is_read_by_the_metric_analyzers():
    rendered = (
        '{handler="/slow"} => 2.5 @ 2026-12-01T10:00:00Z\n'
        '{handler="/ok"} => 0.01 @ 2026-12-01T10:00:00Z\n'
        'up{instance="10.0.0.5:9100", job="node"} => 0 @ 2026-12-01T10:00:00Z\n'
    )
    query = "histogram_quantile(0.99, sum by (le, handler) (rate(http_duration_seconds_bucket[5m])))"
    found, _ = findings_of(rendered, tool="execute_prometheus_instant_query", params={"query": query})
    assert {"slow_endpoint", "target_down"} <= kinds(found)
    down = next(f for f in found if f.kind == "target_down")
    assert "node" in down.summary and "10.0.0.5:9100" in down.summary


def test_a_json_document_keeps_its_own_escapes():
    from diagnostics.agent.analyzers import normalize

    document = json.dumps({"statement": 'SELECT "x"'})
    assert json.loads(normalize(document)) == {"statement": 'SELECT "x"'}
    assert normalize('log line with \\"quotes\\"') == 'log line with "quotes"'


# -- analyzers written for the second round of hand-written cases (hw15-hw18, dev split) -----------


def _probe_pod(probe: str, port: str) -> str:
    return (
        "Name:         zeta-api-7c6b5a4f3-abcde\nNamespace:    umbra\nStatus:       Running\n"
        "Controlled By:  ReplicaSet/zeta-api-7c6b5a4f3\nContainers:\n  web:\n    Image:  x\n"
        f"    Port:           {port}/TCP\n    State:          Running\n    Ready:          True\n"
        f"    Restart Count:  0\n    {probe}\n"
    )


@pytest.mark.parametrize(
    ("probe", "kind_word"),
    [
        ("Liveness:     http-get http://:9310/live delay=5s timeout=1s period=10s", "restarts the container"),
        ("Readiness:    tcp-socket :9310 delay=0s timeout=1s period=10s", "never Ready"),
    ],
)
def test_a_probe_on_a_port_the_container_does_not_declare_is_named(probe, kind_word):
    found, _ = findings_of(_probe_pod(probe, "7100"), params={"kind": "pod"})
    mismatch = [f for f in found if f.kind == "probe_port_mismatch"]
    assert len(mismatch) == 1, [f.summary for f in found]
    assert "port 9310" in mismatch[0].summary and "port 7100" in mismatch[0].summary
    assert kind_word in mismatch[0].summary
    same, _ = findings_of(_probe_pod(probe, "9310"), params={"kind": "pod"})
    assert "probe_port_mismatch" not in kinds(same)


def test_a_volume_with_almost_no_free_space_is_named_from_the_ratio_query():
    query = (
        'kubelet_volume_stats_available_bytes{persistentvolumeclaim="plum-store-data"}'
        ' / kubelet_volume_stats_capacity_bytes{persistentvolumeclaim="plum-store-data"}'
    )

    def result(value: str) -> str:
        metric = {"namespace": "umbra", "persistentvolumeclaim": "plum-store-data"}
        return json.dumps(
            {
                "status": "success",
                "data": {"resultType": "vector", "result": [{"metric": metric, "value": [0, value]}]},
            }
        )

    found, _ = findings_of(result("0.021"), tool="execute_prometheus_instant_query", params={"query": query})
    full = [f for f in found if f.kind == "volume_full"]
    assert len(full) == 1 and "plum-store-data" in full[0].summary and "2.1%" in full[0].summary
    roomy, _ = findings_of(result("0.4"), tool="execute_prometheus_instant_query", params={"query": query})
    assert "volume_full" not in kinds(roomy)


def test_a_pvc_leads_to_the_pod_that_uses_it():
    pvc = (
        "Name: plum-store-data\nNamespace: umbra\nStorageClass: fast\nStatus: Bound\nUsed By: plum-store-0\n"
    )
    _, state = findings_of(pvc, params={"kind": "persistentvolumeclaim"})
    assert [(lead.obj.kind, lead.obj.name, lead.obj.namespace) for lead in state.leads] == [
        ("pod", "plum-store-0", "umbra")
    ]


# kubectl describe node, its timestamp columns left out
NODE = """Name:               mk-node-9
Roles:              <none>
Taints:             node.kubernetes.io/memory-pressure:NoSchedule
Conditions:
  Type             Status  Reason                         Message
  ----             ------  ------                         -------
  MemoryPressure   True    KubeletHasInsufficientMemory   kubelet has insufficient memory available
  DiskPressure     False   KubeletHasNoDiskPressure       kubelet has no disk pressure
  Ready            True    KubeletReady                   kubelet is posting ready status
Events:
  Type     Reason                Age   From     Message
  ----     ------                ----  ----     -------
  Warning  EvictionThresholdMet  5m    kubelet  Attempting to reclaim memory
"""


def test_a_node_under_pressure_is_named_and_its_evicted_pods_followed():
    alert = from_alertmanager({"labels": {"alertname": "NodeUnderPressure", "node": "mk-node-9"}})
    state = AnalysisState(alert)
    found = analyze(ToolOutput("kubectl_describe", {"kind": "node", "name": "mk-node-9"}, NODE), state)
    pressure = [f for f in found if f.kind == "node_pressure"]
    assert len(pressure) == 1 and "MemoryPressure" in pressure[0].summary
    assert "low on memory" in pressure[0].summary and "evicts" in pressure[0].summary
    assert "DiskPressure" not in pressure[0].summary
    assert ("pod", "*") in [(lead.obj.kind, lead.obj.name) for lead in state.leads]
    pods = (
        "NAMESPACE   NAME                      READY   STATUS    RESTARTS   AGE   NODE\n"
        "umbra       lark-batch-5f4e3d2c1-qwert   0/1     Evicted   0          1h    mk-node-9\n"
        "umbra       lark-batch-5f4e3d2c1-zxcvb   1/1     Running   0          5m    mk-node-2\n"
    )
    analyze(ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "pod"}, pods), state)
    followed = {(lead.obj.name, lead.obj.namespace) for lead in state.leads if lead.obj.kind == "pod"}
    assert ("lark-batch-5f4e3d2c1-qwert", "umbra") in followed  # on the node under pressure
    assert ("lark-batch-5f4e3d2c1-zxcvb", "umbra") not in followed  # elsewhere, and not the subject


def test_an_eviction_names_the_container_and_what_it_used():
    event = (
        "Events:\n  Type     Reason   Age   From     Message\n  ----     ------   ----  ----     -------\n"
        "  Warning  Evicted  3m    kubelet  The node was low on resource: memory. Threshold quantity: 100Mi, "
        "available: 80Mi. Container cruncher was using 3Gi, request is 1Gi, has larger consumption of "
        "memory.\n"
    )
    pod = "Name: lark-batch-1\nNamespace: umbra\nStatus: Failed\nContainers:\n  cruncher:\n    Image: x\n"
    found, _ = findings_of(pod + event, params={"kind": "pod"})
    evicted = [f for f in found if f.kind == "evicted"]
    assert evicted and "container cruncher was using 3Gi of memory" in evicted[0].summary
    assert "request of 1Gi" in evicted[0].summary


def test_a_stopped_process_that_others_cannot_reach_is_named_the_cause_in_either_order():
    status = "quillsvc   RUNNING   pid 10, uptime 0:10:00\nvaultd     STOPPED   Dec 01 03:39 PM\n"
    log = "\n".join(
        f"12:00:0{i} ERROR quillsvc: connect to 10.9.8.7:6400 failed: Connection refused" for i in range(4)
    )
    outputs = [
        ("list_processes", {}, status),
        ("tail_log", {"service": "quillsvc"}, log),
    ]
    for order in (outputs, outputs[::-1]):
        state = AnalysisState(AlertContext())
        found = [f for tool, params, text in order for f in analyze(ToolOutput(tool, params, text), state)]
        cause = [f for f in found if f.kind == "dependency_stopped"]
        assert len(cause) == 1, [f.summary for f in found]
        assert cause[0].summary.startswith(
            "vaultd is not running, and quillsvc cannot connect to 10.9.8.7:6400"
        )
        assert cause[0].rank > max(f.rank for f in found if f.kind in ("process_down", "connection_failure"))
        assert cause[0].remedy is not None and cause[0].remedy.target == "vaultd"
    alone, _ = findings_of(status, tool="list_processes")
    assert "dependency_stopped" not in kinds(alone)  # nobody failed to reach it: just a stopped process


def test_a_process_burning_cpu_while_requests_are_slow_is_named_the_cause():
    top = (
        "NAME      PID    CPU%   RSS_MB  UPTIME_S\nquillsvc  4101   88.0   40      600\n"
        "vaultd    4102   2.0    30      600\nfrontd    4103   3.0    30      600\n"
    )
    slow = "\n".join(f"12:00:0{i} WARNING slow request GET /dash took 40{i} ms" for i in range(5))
    state = AnalysisState(AlertContext())
    found = analyze(ToolOutput("tail_log", {"service": "frontd"}, slow), state)
    assert "cpu_bound_latency" not in kinds(found)  # slow, but nothing busy yet
    found += analyze(ToolOutput("process_top", {}, top), state)
    cause = [f for f in found if f.kind == "cpu_bound_latency"]
    assert len(cause) == 1 and cause[0].summary.startswith(
        "quillsvc is busy on CPU while requests are slow in frontd"
    )
    assert cause[0].rank > max(f.rank for f in found if f.kind in ("high_latency", "cpu_saturation"))
    assert cause[0].remedy is not None and cause[0].remedy.target == "quillsvc"


def test_a_filtering_query_by_route_that_returns_one_route_says_the_others_are_under_its_bound():
    query = (
        "histogram_quantile(0.99, sum by (le, path) "
        '(rate(rpc_latency_seconds_bucket{app="ferro"}[5m]))) > 0.5'
    )
    result = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": {"app": "ferro", "path": "/q/fold"}, "value": [0, "2.25"]}],
            },
        }
    )
    found, _ = findings_of(result, tool="execute_prometheus_instant_query", params={"query": query})
    slow = [f for f in found if f.kind == "slow_endpoint"]
    assert len(slow) == 1 and "/q/fold" in slow[0].summary
    assert "No other path is past 0.5 s" in slow[0].summary and "the other paths are fast" in slow[0].summary
    # Not grouped by an endpoint label: nothing can be said of other endpoints.
    ungrouped = query.replace("sum by (le, path)", "sum by (le)")
    found, _ = findings_of(result, tool="execute_prometheus_instant_query", params={"query": ungrouped})
    assert not any("other path" in f.summary for f in found)


JOB = (
    "Name:                     hollow-sync\nNamespace:                quarry\n"
    "Parallelism:              1\nCompletions:              1\n"
    "Active Deadline Seconds:  1800s\n"
    "Pods Statuses:            0 Active (0 Ready) / 0 Succeeded / 1 Failed\n"
    "Events:\n  Type     Reason            Age   From            Message\n"
    "  ----     ------            ----  ----            -------\n"
    "  Normal   SuccessfulCreate  2h    job-controller  Created pod: hollow-sync-x1\n"
    "  Warning  DeadlineExceeded  1h    job-controller  Job was active longer than specified deadline\n"
)


def test_a_job_past_its_deadline_is_named_with_the_deadline():
    found, _ = findings_of(JOB, params={"kind": "job"})
    deadline = [f for f in found if f.kind == "job_deadline_exceeded"]
    assert len(deadline) == 1
    assert (
        "DeadlineExceeded" in deadline[0].summary
        and "activeDeadlineSeconds of 1800 seconds" in deadline[0].summary
    )
    assert deadline[0].rank > max(
        f.rank for f in found if f.kind == "job_failed"
    )  # the cause, not the symptom


def test_a_log_that_ends_on_a_stop_signal_after_progress_says_it_was_stopped_mid_work():
    log = "t1 copying shards 10 of 90\nt2 copying shards 40 of 90\nt3 caught SIGTERM, shutting down\n"
    found, _ = findings_of(log, tool="fetch_pod_logs", params={"pod_name": "pylon-7", "namespace": "quarry"})
    stopped = [f for f in found if f.kind == "stopped_mid_work"]
    assert len(stopped) == 1 and "SIGTERM" in stopped[0].summary and "40 of 90" in stopped[0].summary
    # A signal with no progress before it (a plain shutdown) is not this finding.
    found, _ = findings_of(
        "t1 ready\nt2 caught SIGTERM, shutting down\n", tool="fetch_pod_logs", params={"pod_name": "p"}
    )
    assert "stopped_mid_work" not in kinds(found)
