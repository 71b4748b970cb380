"""Request bodies an ingress controller refuses with 413 before the backend sees them (issue 39, round
seven): the Ingress annotation, the controller ConfigMap, nginx's default. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_INGRESS = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: media-api
  namespace: media
  annotations:
    nginx.ingress.kubernetes.io/proxy-read-timeout: "60"
spec:
  ingressClassName: nginx
"""
_CM = """apiVersion: v1
kind: ConfigMap
metadata:
  name: ingress-nginx-controller
  namespace: ingress-nginx
data:
  use-gzip: "true"
"""
_LOG = (
    "2027/02/02 10:00:00 [error] 31#31: *9 client intended to send too large body: 2200000 bytes, "
    "client: 1.2.3.4\n"
    '1.2.3.4 - - [02/Feb/2027:10:00:00 +0000] "PUT /v1/videos HTTP/1.1" 413 176 "-" "curl" 900 0.000\n'
)


def _run(*outs: ToolOutput) -> tuple[AnalysisState, list[Finding]]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return state, found


def test_no_annotation_and_no_controller_setting_leave_nginx_default_and_413s():
    alert = ToolOutput("alert", {}, "Users get 413 Request Entity Too Large when they upload videos")
    log = ToolOutput(
        "fetch_pod_logs", {"pod_name": "media-api-5d6c7b8a9-abcde", "namespace": "media"}, "ok\n"
    )
    state, _ = _run(alert, log)
    assert any(lead.obj.kind == "ingress" and lead.obj.name == "media-api" for lead in state.leads)
    ingress = ToolOutput("kubectl_get_yaml", {}, _INGRESS)
    cm = ToolOutput("kubectl_get_yaml", {}, _CM)
    controller = ToolOutput(
        "fetch_pod_logs", {"pod_name": "ingress-nginx-controller-x", "namespace": "ingress-nginx"}, _LOG
    )
    state, found = _run(alert, ingress, cm, controller)
    assert any(lead.obj.name == "ingress-nginx-controller" for lead in state.leads)
    (default,) = [f for f in found if f.kind == "ingress_default_body_limit"]
    assert "The Ingress media-api sets no proxy-body-size annotation" in default.summary
    assert "default body size limit of 1m applies" in default.summary
    (refused,) = [f for f in found if f.kind == "ingress_body_too_large"]
    assert (
        "rejects uploads larger than 1m with 413" in refused.summary and "reach media-api" in refused.summary
    )


def test_an_annotated_limit_is_the_one_reported_and_no_default_finding():
    annotated = _INGRESS.replace('proxy-read-timeout: "60"', 'proxy-body-size: "8m"')
    _, found = _run(
        ToolOutput("kubectl_get_yaml", {}, annotated),
        ToolOutput("kubectl_get_yaml", {}, _CM),
        ToolOutput("fetch_pod_logs", {"pod_name": "c", "namespace": "ingress-nginx"}, _LOG),
    )
    assert [f for f in found if f.kind == "ingress_default_body_limit"] == []
    (refused,) = [f for f in found if f.kind == "ingress_body_too_large"]
    assert "larger than 8m" in refused.summary
