"""A ConfigMap written after the pods that read it into their environment started: they run with the old
values until restarted. A mounted ConfigMap (updated in place) is not such a reference. Names appear in
no case."""

from __future__ import annotations

import json

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.kubernetes.config_refs import env_configmaps
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _pod(started: str, env: list[dict[str, object]]) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "mailer-55-x1y2z", "namespace": "notify"},
            "spec": {"containers": [{"name": "mailer", "env": env}]},
            "status": {
                "startTime": started,
                "containerStatuses": [{"state": {"running": {"startedAt": started}}}],
            },
        }
    )


KEY_REF = [
    {"name": "SMTP_HOST", "valueFrom": {"configMapKeyRef": {"name": "mailer-settings", "key": "host"}}}
]
CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: mailer-settings
  namespace: notify
  creationTimestamp: "2026-01-01T00:00:00Z"
  managedFields:
  - manager: helm
    operation: Update
    time: "2026-01-01T00:00:00Z"
  - manager: kubectl-patch
    operation: Update
    time: "{written}"
data:
  host: smtp-relay-b.mail.internal
"""


def _run(started: str, written: str, log: str = "") -> tuple[AnalysisState, list[Finding]]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    reads = [("kubectl_get_yaml", {"kind": "pod"}, _pod(started, KEY_REF))]
    if log:
        reads.append(("fetch_pod_logs", {"pod_name": "mailer-55-x1y2z", "namespace": "notify"}, log))
    reads.append(("kubectl_get_yaml", {"kind": "configmap"}, CONFIGMAP.replace("{written}", written)))
    for tool, params, text in reads:
        out = ToolOutput(tool, params, text)
        state.record(out)
        found += analyze(out, state)
    return state, [f for f in found if f.kind == "environment_older_than_configmap"]


def test_a_configmap_written_after_the_container_started_is_not_in_its_environment():
    log = "2026-02-02T10:00:00Z ERROR send failed: smtp-relay-a.mail.internal: connection timed out\n"
    state, (finding,) = _run("2026-02-01T08:00:00Z", "2026-02-02T09:00:00Z", log)
    assert any(lead.obj.kind == "configmap" and lead.obj.name == "mailer-settings" for lead in state.leads)
    assert "started on 2026-02-01T08:00:00Z" in finding.summary and "2026-02-02T09:00:00Z" in finding.summary
    assert "smtp-relay-b.mail.internal" in finding.summary and "restart" in finding.summary
    assert finding.rank >= 90 and finding.is_problem


def test_a_log_already_showing_the_new_value_ranks_it_low_and_an_older_write_says_nothing():
    log = "2026-02-02T10:00:00Z INFO relay smtp-relay-b.mail.internal ok\n"
    _, (low,) = _run("2026-02-01T08:00:00Z", "2026-02-02T09:00:00Z", log)
    assert low.rank < 70
    _, none = _run("2026-02-03T08:00:00Z", "2026-02-02T09:00:00Z")
    assert none == []


def test_only_environment_references_count_not_mounted_volumes():
    spec = {
        "containers": [{"envFrom": [{"configMapRef": {"name": "a"}}, {"secretRef": {"name": "s"}}]}],
        "initContainers": [{"env": KEY_REF}],
        "volumes": [{"name": "v", "configMap": {"name": "mounted"}}],
    }
    assert env_configmaps(spec) == ["a", "mailer-settings"]
