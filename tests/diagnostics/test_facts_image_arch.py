"""A binary built for another CPU architecture than its node's (issue 39, round nine): the failing pods'
nodes and their arch from a LABELS column, the workload's pods running on the other arch; no finding for
another exec failure. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_NODES = """NAME       STATUS   ROLES    AGE   VERSION   LABELS
amd-1      Ready    <none>   90d   v1.31.0   kubernetes.io/arch=amd64,kubernetes.io/os=linux
graviton-7 Ready    <none>   1h    v1.31.0   kubernetes.io/arch=arm64,kubernetes.io/os=linux
"""
_PODS = """NAME                    READY   STATUS             RESTARTS      AGE   IP         NODE
relay-6d5c4b3a2-aaaaa   1/1     Running            0             9d    10.0.0.4   amd-1
relay-6d5c4b3a2-bbbbb   0/1     CrashLoopBackOff   4 (20s ago)   3m    10.0.9.2   graviton-7
"""


def _run(line: str) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in (
        ToolOutput("fetch_pod_logs", {"pod_name": "relay-6d5c4b3a2-bbbbb", "namespace": "edge"}, line),
        ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "node"}, _NODES),
        ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "edge"}, _PODS),
    ):
        found += analyze(out, state)
    return [f for f in found if f.kind == "image_architecture_mismatch"]


def test_pods_on_arm64_fail_while_those_on_amd64_run():
    line = "standard_init_linux.go:228: exec user process caused: exec format error\n"
    (finding,) = _run(line)
    assert (
        "The relay pods on the arm64 nodes (graviton-7) crash at start with exec format error"
        in finding.summary
    )
    assert "has no arm64 build" in finding.summary
    assert "while its pods on the amd64 nodes run" in finding.summary


def test_no_finding_for_a_missing_binary():
    assert _run("exec /app/relay: no such file or directory\n") == []
