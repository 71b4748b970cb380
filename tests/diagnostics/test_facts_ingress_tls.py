"""A TLS alert's host -> the Ingress that serves it -> its TLS Secret: expired, missing, or a stale reference
while the renewed certificate sits in another Secret. Names, hosts and dates appear in no case."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.kubernetes.ingress_tls import covers
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

INGRESS_YAML = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: portal
  namespace: web
spec:
  tls:
  - hosts:
    - app.corp.test
    secretName: {secret}
  rules:
  - host: app.corp.test
"""
INGRESS_DESCRIBE = """Name:             portal
Namespace:        web
TLS:
  {secret} terminates app.corp.test,api.corp.test
Rules:
  Host           Path  Backends
"""
CERT_YAML = """apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: portal-cert
  namespace: web
spec:
  secretName: portal-cert-v2
  dnsNames:
  - "*.corp.test"
status:
  conditions:
  - type: Ready
    status: "True"
  notAfter: "2031-05-01T00:00:00Z"
"""
SECRETS = """NAME             TYPE                DATA   AGE
portal-cert-v1   kubernetes.io/tls   2      400d
portal-cert-v2   kubernetes.io/tls   2      3d
db-password      Opaque              1      400d
"""


def _probe(expiry: int, now: int) -> str:
    series = {"__name__": "probe_ssl_earliest_cert_expiry", "instance": "https://app.corp.test/login"}
    result = [{"metric": series, "value": [now, str(expiry)]}]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def _state(summary: str = "TLS certificate for https://app.corp.test expired") -> AnalysisState:
    return AnalysisState(AlertContext(title="CertificateExpired", annotations={"summary": summary}))


def _run(state: AnalysisState, *outputs: tuple[str, dict[str, str], str]) -> list[Finding]:
    found: list[Finding] = []
    for tool, params, text in outputs:
        found += analyze(ToolOutput(tool, params, text), state)
    return [f for f in found if f.kind.startswith("ingress_tls")]


def _yaml(kind: str, text: str) -> tuple[str, dict[str, str], str]:
    return ("kubectl_get_yaml", {"kind": kind, "namespace": "web"}, text)


PROBE_EXPIRED = (
    "prometheus_query",
    {"query": "probe_ssl_earliest_cert_expiry"},
    _probe(1_700_000_000, 1_800_000_000),
)
SECRETS_OUT = ("kubectl_get_by_kind_in_namespace", {"kind": "secret", "namespace": "web"}, SECRETS)


def test_an_alert_with_no_namespace_leads_to_the_ingresses_of_every_namespace():
    state = _state()
    _run(state, ("kubectl_get_by_kind_in_cluster", {"kind": "namespace"}, "NAME   STATUS\nweb    Active\n"))
    leads = {(lead.obj.kind, lead.obj.namespace) for lead in state.leads}
    assert ("ingress", "web") in leads and ("namespace", "") in leads
    listing = (
        "NAME     CLASS   HOSTS                        ADDRESS    PORTS     AGE\n"
        "portal   nginx   app.corp.test,api.corp.test   1.2.3.4   80, 443   9d\n"
    )
    _run(state, ("kubectl_get_by_kind_in_namespace", {"kind": "ingress", "namespace": "web"}, listing))
    assert any(lead.obj.kind == "ingress" and lead.obj.name == "portal" for lead in state.leads)


def test_an_expired_secret_with_the_renewal_in_another_secret_is_a_stale_reference():
    state = _state()
    (first,) = _run(state, PROBE_EXPIRED, _yaml("ingress", INGRESS_YAML.format(secret="portal-cert-v1")))
    assert "still serves the TLS Secret portal-cert-v1 for app.corp.test, whose certificate has expired" in (
        first.summary
    )
    assert any(lead.obj.kind == "certificate" and lead.obj.namespace == "web" for lead in state.leads)
    (stale,) = _run(state, _yaml("certificate", CERT_YAML))
    assert "the renewed certificate (Certificate portal-cert, Ready, valid until 2031-05-01" in stale.summary
    assert "is in Secret portal-cert-v2, which the Ingress does not reference" in stale.summary
    assert stale.rank > first.rank and stale.subject == "ingress/web/portal"


def test_a_certificate_still_valid_by_the_probe_is_no_finding():
    state = _state("probe of https://app.corp.test over tls is slow")
    fresh = ("prometheus_query", {"query": "q"}, _probe(1_900_000_000, 1_800_000_000))
    assert _run(state, fresh, _yaml("ingress", INGRESS_YAML.format(secret="portal-cert-v1"))) == []


def test_a_secret_the_namespace_does_not_have_is_named_missing():
    state = _state()
    found = _run(
        state,
        ("kubectl_describe", {"kind": "ingress"}, INGRESS_DESCRIBE.format(secret="portal-tls")),
        SECRETS_OUT,
    )
    (missing,) = [f for f in found if f.kind == "ingress_tls_secret_missing"]
    assert (
        "names TLS Secret portal-tls for app.corp.test, which does not exist in namespace web"
        in missing.summary
    )
    ok = _state()
    present = ("kubectl_describe", {"kind": "ingress"}, INGRESS_DESCRIBE.format(secret="portal-cert-v2"))
    assert _run(ok, present, SECRETS_OUT) == []


def test_an_alert_about_something_else_reads_no_ingress():
    state = AnalysisState(
        AlertContext(title="HighLatency", annotations={"summary": "https://app.corp.test is slow"})
    )
    assert _run(state, _yaml("ingress", INGRESS_YAML.format(secret="gone"))) == []
    assert not any(lead.obj.kind == "namespace" for lead in state.leads)


def test_wildcards_cover_one_label():
    assert covers("*.corp.test", "app.corp.test") and not covers("*.corp.test", "a.b.corp.test")
    assert covers("App.Corp.Test", "app.corp.test") and not covers("corp.test", "app.corp.test")


def test_seconds_left_below_zero_from_the_alerts_own_expression_mean_expired():
    result = [
        {"metric": {"instance": "https://app.corp.test", "job": "probe"}, "value": [1_800_000_000, "-86400"]}
    ]
    text = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
    query = "probe_ssl_earliest_cert_expiry - time() < 0"
    (finding,) = _run(
        _state(),
        ("prometheus_query", {"query": query}, text),
        _yaml("ingress", INGRESS_YAML.format(secret="s1")),
    )
    assert "whose certificate has expired (probe_ssl_earliest_cert_expiry 2027-01-14" in finding.summary


def test_a_certificate_past_its_not_after_expires_the_secret_it_writes():
    state = _state()
    state.alert.asked_at = datetime(2032, 1, 1, tzinfo=UTC)
    state.alert.subject.namespace = "web"
    _run(state, ("kubectl_get_by_kind_in_cluster", {"kind": "namespace"}, "NAME   STATUS\nweb    Active\n"))
    assert any(lead.obj.kind == "ingress" and lead.obj.namespace == "web" for lead in state.leads)
    cert = _yaml("certificate", CERT_YAML)
    (finding,) = _run(state, cert, _yaml("ingress", INGRESS_YAML.format(secret="portal-cert-v2")))
    assert "still serves the TLS Secret portal-cert-v2" in finding.summary
    assert "(Certificate portal-cert notAfter 2031-05-01T00:00:00Z)" in finding.summary
    assert "renewed" not in finding.summary  # the Certificate writes the Secret the Ingress serves


def test_a_routed_host_no_tls_entry_covers_gets_the_default_certificate():
    yaml_text = INGRESS_YAML.format(secret="portal-cert-v2").replace(
        "- host: app.corp.test", "- host: shop.other.test"
    )
    state = _state("TLS handshake for https://shop.other.test fails: certificate not valid for the host")
    (finding,) = _run(state, _yaml("ingress", yaml_text))
    assert (
        finding.kind == "ingress_tls_host_uncovered" and "routes shop.other.test but none" in finding.summary
    )
    covered = _state("TLS handshake for https://app.corp.test fails")
    routed = INGRESS_YAML.format(secret="portal-cert-v2")
    assert [f.kind for f in _run(covered, _yaml("ingress", routed))] == []
