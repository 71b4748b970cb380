"""A server that cannot bind a port below 1024 as a non-root user (issue 39, round seven): the port from
its log (Go's and nginx's wordings here), the user and dropped capabilities from the pod manifest. Names
appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_POD = """apiVersion: v1
kind: Pod
metadata:
  name: gateway-6c7d8e9f0-abcde
  namespace: edge
spec:
  securityContext:
    runAsUser: 10001
  containers:
  - name: gateway
    securityContext:
      capabilities:
        drop: ["ALL"]
"""


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "privileged_port_non_root"]


def _log(text: str) -> ToolOutput:
    return ToolOutput(
        "kubectl_previous_logs", {"pod_name": "gateway-6c7d8e9f0-abcde", "namespace": "edge"}, text
    )


def test_a_non_root_user_without_capabilities_cannot_bind_a_low_port():
    go = "2027/01/01 00:00:00 server: listen tcp 0.0.0.0:443: bind: permission denied\n"
    (finding,) = _run(ToolOutput("kubectl_get_yaml", {}, _POD), _log(go))
    assert "gateway runs as user 10001, not root, with all capabilities dropped," in finding.summary
    assert "cannot bind port 443" in finding.summary and "crash loops" in finding.summary
    nginx = "nginx: [emerg] bind() to 0.0.0.0:80 failed (13: Permission denied)\n"
    (other,) = _run(_log(nginx), ToolOutput("kubectl_get_yaml", {}, _POD))
    assert "cannot bind port 80" in other.summary


def test_a_high_port_or_no_sign_of_a_non_root_user_says_nothing():
    high = "2027/01/01 00:00:00 listen tcp :8443: bind: permission denied\n"
    assert _run(ToolOutput("kubectl_get_yaml", {}, _POD), _log(high)) == []
    low = "2027/01/01 00:00:00 listen tcp :443: bind: permission denied\n"
    assert _run(_log(low)) == []
