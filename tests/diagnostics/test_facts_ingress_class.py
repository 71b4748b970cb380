"""An Ingress whose class names no IngressClass (issue 39, round nine): from a manifest and the class
listing, or from the controller's 'Ignoring ingress' line; no finding when the class exists."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _ingress(cls: str) -> str:
    return f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: docs
  namespace: web
spec:
  ingressClassName: {cls}
  rules:
  - host: docs.test.example
"""


_CLASSES = """NAME      CONTROLLER                  PARAMETERS   AGE
traefik   traefik.io/ingress-controller   <none>   300d
"""


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind == "ingress_class_missing"]


def test_a_class_the_listing_lacks():
    (finding,) = _run(
        ToolOutput("kubectl_get_yaml", {}, _ingress("nginx")),
        ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "ingressclass"}, _CLASSES),
    )
    assert (
        "The Ingress docs names the IngressClass nginx, which does not exist (the cluster has traefik)"
        in finding.summary
    )
    assert "so it has no address and docs.test.example serves nothing" in finding.summary


def test_no_finding_when_the_class_exists():
    assert (
        _run(
            ToolOutput("kubectl_get_yaml", {}, _ingress("traefik")),
            ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "ingressclass"}, _CLASSES),
        )
        == []
    )
