"""A StatefulSet whose ordered pod management waits on a pod that is not Ready (issue 39, round nine): the
gap from the manifest, the pod listing, the waiting pod's probe and log line; no finding with Parallel."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _manifest(policy: str = "") -> str:
    line = f"\n  podManagementPolicy: {policy}" if policy else ""
    return f"""apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: quorum
  namespace: coord
spec:
  replicas: 5{line}
status:
  replicas: 2
  readyReplicas: 1
"""


_PODS = """NAME       READY   STATUS    RESTARTS   AGE
quorum-0   1/1     Running   0          30d
quorum-1   0/1     Running   0          12m
"""
_DESCRIBE = """Name:             quorum-1
Namespace:        coord
Controlled By:    StatefulSet/quorum
Containers:
  quorum:
    Ready:          False
Events:
  Warning  Unhealthy  1m  kubelet  Readiness probe failed: HTTP probe failed with statuscode: 500
"""
_LOG = (
    "2027-01-01T00:00:00Z INFO boot\n"
    "2027-01-01T00:00:01Z ERROR cannot reach peer quorum-0: not ready to serve\n"
)


def _run(policy: str = "") -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in (
        ToolOutput("kubectl_get_yaml", {}, _manifest(policy)),
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "coord"}, _PODS),
        ToolOutput("kubectl_describe", {}, _DESCRIBE),
        ToolOutput("fetch_pod_logs", {"pod_name": "quorum-1", "namespace": "coord"}, _LOG),
    ):
        found += analyze(out, state)
    return [f for f in found if f.kind == "statefulset_ordered_wait"]


def test_the_next_ordinal_waits_on_the_unready_pod():
    (finding,) = _run()
    assert (
        "wants 5 replicas but has 2 pods, 1 ready: with podManagementPolicy OrderedReady" in finding.summary
    )
    assert "it creates quorum-2 only after quorum-1 is Ready" in finding.summary
    assert "its readiness probe answers 500" in finding.summary
    assert "cannot reach peer quorum-0" in finding.summary


def test_no_finding_with_parallel_pod_management():
    assert _run("Parallel") == []
