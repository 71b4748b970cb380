"""A client that stops trusting a peer after the peer's CA was rotated (issue 39): the peer from the
client's x509 error, the peer's reissued Certificate and its issuer's new CA, the client's mounted trust
bundle holding only the old one. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_DESCRIBE = """Name:  ledger-api
Namespace:  money
Pod Template:
  Containers:
   api:
    Mounts:
      /etc/pki/corp from corp-trust (ro)
  Volumes:
   corp-trust:
    Type:      ConfigMap (a volume populated by a ConfigMap)
    Name:      corp-trust-bundle
"""
_LOG = (
    "2027-05-01T06:00:00Z INFO started\n"
    '2027-05-01T06:31:10Z ERROR call failed: Get "https://fx-rates.pricing.svc:9443/v1/rates": '
    "tls: failed to verify certificate: x509: certificate signed by unknown authority\n"
)
_CERT = """apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: fx-rates-tls
  namespace: pricing
spec:
  issuerRef:
    kind: ClusterIssuer
    name: corp-root
status:
  notBefore: "2027-05-01T06:30:02Z"
"""
_ISSUER = """apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata:
  name: corp-root
  annotations:
    corp.example/subject: "CN=corp-root-g3"
spec:
  ca:
    secretName: corp-root-g3
"""
_BUNDLE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: corp-trust-bundle
  namespace: money
data:
  ca.pem: |
    # Subject: CN=corp-root-g2
    -----BEGIN CERTIFICATE-----
    -----END CERTIFICATE-----
"""


def _run(*outs: ToolOutput) -> tuple[AnalysisState, list[Finding]]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return state, [f for f in found if f.kind in ("peer_ca_rotated", "trust_bundle_stale")]


def test_a_rotated_peer_ca_and_a_stale_client_bundle() -> None:
    state, found = _run(
        ToolOutput(
            "kubectl_describe", {"kind": "deployment", "name": "ledger-api", "namespace": "money"}, _DESCRIBE
        ),
        ToolOutput("fetch_pod_logs", {"pod_name": "ledger-api-6d5f4c3b2-k8j7h", "namespace": "money"}, _LOG),
        ToolOutput("kubectl_get_yaml", {"kind": "certificate"}, _CERT),
        ToolOutput("kubectl_get_yaml", {"kind": "clusterissuer"}, _ISSUER),
        ToolOutput("kubectl_get_yaml", {"kind": "configmap"}, _BUNDLE),
    )
    leads = {(lead.obj.kind, lead.obj.name, lead.obj.namespace) for lead in state.leads}
    assert {("certificate", "fx-rates-tls", "pricing"), ("clusterissuer", "corp-root", "")} <= leads
    assert ("configmap", "corp-trust-bundle", "money") in leads
    (peer,) = [f for f in found if f.kind == "peer_ca_rotated"]
    assert (
        "ledger-api fails to call fx-rates with x509: certificate signed by unknown authority" in peer.summary
    )
    assert "reissued at 06:30" in peer.summary and "rotated CA corp-root-g3" in peer.summary
    (bundle,) = [f for f in found if f.kind == "trust_bundle_stale"]
    assert "corp-trust-bundle that ledger-api mounts holds only the old CA corp-root-g2" in bundle.summary


def test_a_bundle_that_holds_the_new_ca_and_no_x509_error_say_nothing() -> None:
    fresh = _BUNDLE.replace("CN=corp-root-g2", "CN=corp-root-g2\n    # Subject: CN=corp-root-g3")
    _, found = _run(
        ToolOutput("fetch_pod_logs", {"pod_name": "ledger-api-6d5f4c3b2-k8j7h", "namespace": "money"}, _LOG),
        ToolOutput("kubectl_get_yaml", {"kind": "clusterissuer"}, _ISSUER),
        ToolOutput("kubectl_get_yaml", {"kind": "configmap"}, fresh),
    )
    assert [f.kind for f in found] == []
    quiet = _LOG.replace("x509: certificate signed by unknown authority", "connection reset by peer")
    _, found = _run(
        ToolOutput("fetch_pod_logs", {"pod_name": "ledger-api-6d5f4c3b2-k8j7h", "namespace": "money"}, quiet),
        ToolOutput("kubectl_get_yaml", {"kind": "certificate"}, _CERT),
        ToolOutput("kubectl_get_yaml", {"kind": "clusterissuer"}, _ISSUER),
        ToolOutput("kubectl_get_yaml", {"kind": "configmap"}, _BUNDLE),
    )
    assert found == []


def test_an_outside_peer_is_not_looked_for_in_the_cluster() -> None:
    outside = _LOG.replace("fx-rates.pricing.svc:9443", "api.vendor.example")
    state, found = _run(
        ToolOutput(
            "fetch_pod_logs", {"pod_name": "ledger-api-6d5f4c3b2-k8j7h", "namespace": "money"}, outside
        )
    )
    assert found == [] and not any(lead.obj.kind == "certificate" for lead in state.leads)


# What a finding names, it read (issue 39): the peer's Certificate by its dnsNames, the CA by the subject
# its issuer shows, the bundle the client mounts; where one was not read, the finding says so.
_OTHER_CERT = _CERT.replace("fx-rates-tls", "ledger-web-tls").replace("pricing", "money")
_BY_DNS = _CERT.replace("name: fx-rates-tls", "name: gw-serving").replace(
    "spec:\n", "spec:\n  dnsNames:\n  - fx-rates.pricing.svc\n"
)
_LOG_OUT = ToolOutput(
    "fetch_pod_logs", {"pod_name": "ledger-api-6d5f4c3b2-k8j7h", "namespace": "money"}, _LOG
)


def _yaml(kind: str, text: str) -> ToolOutput:
    return ToolOutput("kubectl_get_yaml", {"kind": kind}, text)


def test_a_certificate_that_is_not_the_peers_is_not_reported_as_its_certificate() -> None:
    _, found = _run(
        _LOG_OUT,
        _yaml("certificate", _OTHER_CERT),
        _yaml("clusterissuer", _ISSUER),
        _yaml("configmap", _BUNDLE),
    )
    assert [f.kind for f in found] == ["trust_bundle_stale"]
    assert "ledger-web-tls" not in found[0].summary and "fx-rates-tls" not in found[0].summary
    assert "its name was not observed" in found[0].summary and "ClusterIssuer corp-root" in found[0].summary


def test_the_peers_certificate_is_found_by_its_dns_names_and_named_as_read() -> None:
    _, found = _run(
        _LOG_OUT, _yaml("certificate", _BY_DNS), _yaml("clusterissuer", _ISSUER), _yaml("configmap", _BUNDLE)
    )
    (peer,) = [f for f in found if f.kind == "peer_ca_rotated"]
    assert "Certificate pricing/gw-serving" in peer.summary and "fx-rates-tls" not in peer.summary
    (bundle,) = [f for f in found if f.kind == "trust_bundle_stale"]
    assert "which now signs fx-rates's certificate gw-serving" in bundle.summary


def test_a_ca_whose_subject_was_not_observed_is_named_by_the_secret_the_issuer_names() -> None:
    unnamed = _ISSUER.replace('  annotations:\n    corp.example/subject: "CN=corp-root-g3"\n', "")
    _, found = _run(
        _LOG_OUT, _yaml("certificate", _CERT), _yaml("clusterissuer", unnamed), _yaml("configmap", _BUNDLE)
    )
    (peer,) = found  # no bundle finding: a Secret's name cannot be compared with the bundle's subjects
    assert peer.kind == "peer_ca_rotated"
    assert "held in Secret corp-root-g3 (its subject was not observed)" in peer.summary


def test_a_secret_volume_is_not_taken_for_the_bundle_configmap() -> None:
    secret_volume = _DESCRIBE.replace(
        "Type:      ConfigMap (a volume populated by a ConfigMap)\n    Name:      corp-trust-bundle",
        "Type:        Secret (a volume populated by a Secret)\n    SecretName:  corp-trust-certs",
    )
    state, _ = _run(
        ToolOutput(
            "kubectl_describe",
            {"kind": "deployment", "name": "ledger-api", "namespace": "money"},
            secret_volume,
        ),
        _LOG_OUT,
    )
    assert not any(lead.obj.kind == "configmap" for lead in state.leads)
