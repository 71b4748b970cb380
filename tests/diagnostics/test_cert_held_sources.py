"""Certificates held where no cert-manager Certificate prints a notAfter (issue 39, class 3): a TLS Secret's
tls.crt (parsed with ``cryptography``), cert-manager's and the blackbox exporter's expiry metrics; and a
question that names the object ("gateway-tls") without the word "certificate" is a certificate question.
Names appear in no case."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.investigation.observer import InvestigationView
from diagnostics.agent.questions import certificates, objects
from diagnostics.agent.questions.cert_sources import from_metrics, from_secrets
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import AlertContext
from diagnostics.toolsets.base import ToolSpec
from tests.support.certs import self_signed_pem

x509 = pytest.importorskip("cryptography.x509")
NOW = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def _pem(not_after: datetime, host: str) -> str:
    return self_signed_pem(not_after, host, valid_days=90)


def _secret(name: str, not_after: datetime, host: str) -> str:
    crt = base64.b64encode(_pem(not_after, host).encode()).decode()
    return (
        f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: edge\n"
        f"type: kubernetes.io/tls\ndata:\n  tls.crt: {crt}\n  tls.key: c2VjcmV0\n"
    )


def test_a_tls_secrets_certificate_is_read_for_its_expiry_and_hosts():
    (held,) = from_secrets(_secret("quay-tls", NOW + timedelta(days=9), "quay.corp.example"))
    assert held.label == "quay-tls (namespace edge)"
    assert held.not_after == NOW + timedelta(days=9) and held.hosts == ("quay.corp.example",)
    unparsable = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\ndata:\n  tls.crt: bm90IGEgY2VydA==\n"
    assert from_secrets(unparsable) == []


def test_expiry_metrics_name_their_certificates():
    api = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {
                    "metric": {
                        "__name__": "certmanager_certificate_expiration_timestamp_seconds",
                        "name": "portal-cert",
                        "namespace": "web",
                    },
                    "value": [1_777_000_000, str((NOW + timedelta(days=3)).timestamp())],
                }
            ],
        },
    }
    (cm,) = from_metrics(json.dumps(api))
    assert cm.label == "portal-cert (namespace web)" and cm.not_after == NOW + timedelta(days=3)
    text = 'probe_ssl_earliest_cert_expiry{instance="https://pay.example.org",job="bb"} '
    text += f"{NOW.timestamp():.0f}\n"
    (probe,) = from_metrics(text)
    assert probe.hosts == ("pay.example.org",) and probe.not_after == NOW


def _state(question: str, *outs: ToolOutput) -> AnalysisState:
    state = AnalysisState(AlertContext(text=question, title=question))
    state.intent = classify(question, anchor=NOW)
    for out in outs:
        state.record(out)
    return state


def test_a_question_that_names_a_tls_object_without_the_word_certificate_is_about_a_certificate():
    question = "does gateway-tls expire in 2 weeks"
    assert certificates.asked_names(question) == ["gateway-tls"]
    assert objects.asked(_state(question)) == ("certificate", ["gateway-tls"])
    assert certificates.asked_names("is the api-gateway pod ok") == []
    # A workload named for what it does with certificates is not one.
    assert certificates.asked_names("why is personal-certs-validator in a crashloopbackoff?") == []
    assert certificates.asked_names("is tls-edge still valid?") == ["tls-edge"]


def test_a_tls_object_asked_about_is_answered_from_its_secret():
    question = "does gateway-tls expire in 2 weeks"
    secret = ToolOutput(
        "kubectl_get_yaml",
        {"kind": "secret", "name": "gateway-tls", "namespace": "edge"},
        _secret("gateway-tls", NOW + timedelta(days=10), "gw.example.net"),
    )
    first, _ = objects.object_verdict(_state(question, secret)) or ("", [])
    assert first.startswith("Yes: the certificate gateway-tls (namespace edge) expires on 2026-05-11")
    later = ToolOutput(
        secret.tool, secret.params, _secret("gateway-tls", NOW + timedelta(days=40), "gw.example.net")
    )
    first, _ = objects.object_verdict(_state(question, later)) or ("", [])
    assert first.startswith("No: the certificate gateway-tls (namespace edge) expires on 2026-06-10")


def _tool(name: str, *required: str) -> ToolSpec:
    props = {p: {"type": "string"} for p in required}
    return ToolSpec(name, name, {"type": "object", "properties": props, "required": list(required)})


TOOLS = [
    _tool("kubectl_get_by_kind_in_cluster", "kind"),
    _tool("kubectl_get_yaml", "kind", "name", "namespace"),
    _tool("execute_prometheus_instant_query", "query"),
]
INGRESS = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: front
  namespace: edge
spec:
  tls:
  - hosts: [gw.example.net]
    secretName: front-2026
  rules:
  - host: gw.example.net
"""


def test_a_hosts_certificate_is_read_from_the_secret_its_ingress_serves_and_from_the_metrics():
    question = "is the certificate for gw.example.net about to expire?"
    state = _state(question)
    view = InvestigationView(AlertContext(text=question), TOOLS, [], [], [], state, 0, 20)
    wanted = [(tool, params) for tool, params, _ in objects.certificate_reads(view, ["gw.example.net"])]
    assert ("kubectl_get_by_kind_in_cluster", {"kind": "ingress"}) in wanted
    assert ("execute_prometheus_instant_query", {"query": "probe_ssl_earliest_cert_expiry"}) in wanted
    listing = "NAMESPACE   NAME    CLASS   HOSTS            ADDRESS   PORTS     AGE\n"
    listing += "edge        front   nginx   gw.example.net   10.0.0.9  80, 443   40d\n"
    for out in (
        ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "ingress"}, listing),
        ToolOutput("kubectl_get_yaml", {"kind": "ingress", "name": "front", "namespace": "edge"}, INGRESS),
    ):
        state.record(out)
        analyze(out, state)
    wanted = [(tool, params) for tool, params, _ in objects.certificate_reads(view, ["gw.example.net"])]
    assert ("kubectl_get_yaml", {"kind": "ingress", "name": "front", "namespace": "edge"}) in wanted
    assert ("kubectl_get_yaml", {"kind": "secret", "name": "front-2026", "namespace": "edge"}) in wanted
    secret = _secret("front-2026", NOW + timedelta(days=5), "gw.example.net")
    state.record(
        ToolOutput("kubectl_get_yaml", {"kind": "secret", "name": "front-2026", "namespace": "edge"}, secret)
    )
    first, _ = objects.object_verdict(state) or ("", [])
    assert first.startswith("Yes: the certificate front-2026 (namespace edge) expires on 2026-05-06")


def test_a_metric_of_other_certificates_does_not_answer_for_the_one_asked():
    text = 'certmanager_certificate_expiration_timestamp_seconds{name="other-tls",namespace="x"} '
    text += f"{(NOW + timedelta(days=2)).timestamp():.0f}\n"
    metric = ToolOutput("execute_prometheus_instant_query", {"query": "certmanager"}, text)
    first, _ = objects.object_verdict(_state("does gateway-tls expire in 2 weeks", metric)) or ("", [])
    assert first.startswith("No data: no read showed when the certificate for gateway-tls expires")
    named = ToolOutput(metric.tool, metric.params, text.replace("other-tls", "gateway-tls"))
    first, _ = objects.object_verdict(_state("does gateway-tls expire in 2 weeks", named)) or ("", [])
    assert first.startswith("Yes: the certificate gateway-tls (namespace x) expires on 2026-05-03")
