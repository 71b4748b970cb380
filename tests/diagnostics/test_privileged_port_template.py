"""A server denied a port below 1024 (issue 39): when the pod's manifest does not say the user, the
template the pod was made from (its ReplicaSet) is read first and the finding names the user an image
note gives, and the image's tag; a template never read delays the finding by a few reads only."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_POD = """apiVersion: v1
kind: Pod
metadata:
  name: portal-8f7e6d5c4-q9w8e
  namespace: web
spec:
  securityContext:
    runAsNonRoot: true
  containers:
  - name: portal
    image: registry.local/web/portal:7.2.1
    securityContext:
      capabilities:
        drop: ["ALL"]
"""
_RS = """Name:         portal-8f7e6d5c4
Namespace:    web
Annotations:  images.local/user: 1001 (nonroot, from chainguard/python:latest)
Controlled By:  Deployment/portal
"""
_LOG = "Traceback (most recent call last):\nPermissionError: [Errno 13] Permission denied: bind port 443\n"
_POD_PARAMS = {"pod_name": "portal-8f7e6d5c4-q9w8e", "namespace": "web"}


def _found(state: AnalysisState, out: ToolOutput) -> list[Finding]:
    return [f for f in analyze(out, state) if f.kind == "privileged_port_non_root"]


def test_the_template_is_read_first_and_names_the_user() -> None:
    state = AnalysisState(AlertContext())
    assert _found(state, ToolOutput("kubectl_get_yaml", {"kind": "pod"}, _POD)) == []
    assert _found(state, ToolOutput("kubectl_previous_logs", _POD_PARAMS, _LOG)) == []
    (rs_lead,) = [lead for lead in state.leads if lead.obj.kind == "replicaset"]
    assert (rs_lead.obj.name, rs_lead.obj.namespace) == ("portal-8f7e6d5c4", "web")
    rs = ToolOutput("kubectl_describe", {"kind": "replicaset", "name": "portal-8f7e6d5c4"}, _RS)
    (finding,) = _found(state, rs)
    assert "portal 7.2.1 runs as user 1001, not root, with all capabilities dropped" in finding.summary
    assert "cannot bind port 443" in finding.summary


def test_a_template_never_read_delays_the_finding_by_a_few_reads() -> None:
    state = AnalysisState(AlertContext())
    _found(state, ToolOutput("kubectl_get_yaml", {"kind": "pod"}, _POD))
    assert _found(state, ToolOutput("kubectl_previous_logs", _POD_PARAMS, _LOG)) == []
    other = ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "service", "namespace": "web"}, "NAME\nx")
    found = [f for _ in range(4) for f in _found(state, other)]
    (finding,) = found
    assert "portal 7.2.1 runs as a user other than root" in finding.summary
