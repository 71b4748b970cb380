"""Issue 39: the read toolset's Secrets (redacted at its boundary), cert-manager Certificates (custom
objects), Ingresses and CronJobs, with the official client against hand-written API responses
(tests/diagnostics/fixtures/kubernetes_secrets: names, values, the certificate and its key are made up for
the fixture). No value of a Secret, no tls.key and no last-applied annotation leaves the toolset, in any
tool's output, in any encoding; the certificate question is answered from what the toolset returns."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.questions import cert_expiry
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import from_text
from diagnostics.agent.runner import MemoryRecorder, Outcome, investigate
from diagnostics.toolsets.base import ReadToolset
from diagnostics.toolsets.kubernetes import KubernetesConfig, KubernetesReadToolset
from diagnostics.toolsets.registry import Environment
from tests.diagnostics.lab.test_kubernetes_toolset import kubeconfig
from tests.support.fixture_server import FIXTURES, FixtureServer

NS = "shop"
SECRETS = ("legacy-tls", "db-credentials", "garbled-tls", "huge-tls")
ASKED = datetime(2027, 3, 2, 8, 0, tzinfo=UTC)
QUESTION = "which certificates expire in the next 30 days?"


@pytest.fixture(scope="module")
def server() -> Iterator[FixtureServer]:
    with FixtureServer("kubernetes_secrets", {"read-token": {"GET"}}).running() as fixture:
        yield fixture


def _reader(server: FixtureServer, tmp_path: Path, *, read_secrets: bool = True) -> KubernetesReadToolset:
    path = kubeconfig(tmp_path / "read.yaml", server.url, "read-token")
    return KubernetesReadToolset(KubernetesConfig(read_kubeconfig=path, read_secrets=read_secrets))


def _forbidden() -> list[str]:
    """Every value the fixture's Secrets hold, as the API sends it (base64) and decoded, and the last-applied
    annotation: none may appear in any output."""
    found = ["last-applied-configuration", "PRIVATE KEY", "BEGIN CERTIFICATE"]
    for name in SECRETS:
        secret = json.loads((FIXTURES / "kubernetes_secrets" / f"secret_{name}.json").read_text())
        for value in secret["data"].values():
            decoded = base64.b64decode(value).decode("ascii", "replace")
            found += [value, value[:40], value[-40:], decoded[:40]]
            found += [line for line in decoded.splitlines() if len(line) >= 16 and "CERTIFICATE" not in line]
    return [f for f in found if f]


def _every_secret_read(reader: KubernetesReadToolset) -> list[str]:
    calls = [
        ("kubectl_get_by_kind_in_namespace", {"kind": "secret", "namespace": NS}),
        ("kubectl_get_by_kind_in_cluster", {"kind": "secret"}),
        ("kubectl_find_resource", {"kind": "secret", "keyword": "tls"}),
    ]
    for name in SECRETS:
        obj = {"kind": "secret", "name": name, "namespace": NS}
        calls += [("kubectl_get_by_name", obj), ("kubectl_describe", obj), ("kubectl_get_yaml", obj)]
    outputs = []
    for tool, params in calls:
        result = reader.call(tool, params)
        assert result.ok, (tool, params, result.output)
        outputs.append(result.output)
    return outputs


def test_no_secret_value_tls_key_or_last_applied_leaves_the_toolset(
    server: FixtureServer, tmp_path: Path
) -> None:
    outputs = _every_secret_read(_reader(server, tmp_path))
    forbidden = _forbidden()
    assert len(forbidden) > 12
    for output in outputs:
        raw = output.encode()
        leaked = [f for f in forbidden if f.encode() in raw or f.lower().encode() in raw.lower()]
        assert not leaked, (leaked, output[:400])
    joined = "\n".join(outputs)
    # What is returned instead: names, types, key names and sizes, the certificate's metadata.
    assert "db-credentials   Opaque              2" in joined
    assert "password:  20 bytes" in joined and "tls.key: '<redacted: 241 bytes>'" in joined
    assert "Not After:   2027-03-12T00:00:00Z" in joined and "notAfter: '2027-03-12T00:00:00Z'" in joined
    assert "CN=legacy.lantern.example" in joined and "www.legacy.lantern.example" in joined
    assert "team: storefront" in joined  # other annotations stay
    assert "unreadable (tls.crt is 65540 base64 characters, over the 65536 read)" in joined
    assert "unreadable: tls.crt is not a readable X.509 certificate" in joined


def test_secrets_are_off_unless_switched_on(server: FixtureServer, tmp_path: Path) -> None:
    reader = _reader(server, tmp_path, read_secrets=False)
    server.requests.clear()
    for tool in ("kubectl_get_by_kind_in_cluster", "kubectl_get_yaml"):
        result = reader.call(tool, {"kind": "secret", "name": "db-credentials", "namespace": NS})
        assert not result.ok and "SKILLGATE_K8S_READ_SECRETS is off" in result.output
    assert not server.requests
    kinds = {
        s.name: s.parameters["properties"]["kind"]["enum"]
        for s in reader.tools()
        if s.name.startswith("kubectl_get")
    }
    assert all(
        "secret" not in enum and {"ingress", "cronjob", "certificate"} <= set(enum) for enum in kinds.values()
    )


def test_certificates_ingresses_and_cronjobs_are_read(server: FixtureServer, tmp_path: Path) -> None:
    reader = _reader(server, tmp_path)
    certs = reader.call("kubectl_get_by_kind_in_cluster", {"kind": "certificate"}).output
    assert certs.splitlines()[0].split()[:5] == ["NAMESPACE", "NAME", "READY", "SECRET", "ISSUER"]
    assert "api-tls" in certs and "2027-03-22T00:00:00Z" in certs
    described = reader.call("kubectl_describe", {"kind": "certificate", "name": "api", "namespace": NS})
    assert (
        "notAfter: '2027-03-22T00:00:00Z'" in described.output and "secretName: api-tls" in described.output
    )
    as_yaml = reader.call("kubectl_get_yaml", {"kind": "certificate", "name": "storefront", "namespace": NS})
    assert "kind: Certificate" in as_yaml.output and "storefront-tls" in as_yaml.output
    assert server.requests[-1].path == f"/apis/cert-manager.io/v1/namespaces/{NS}/certificates/storefront"
    ingresses = reader.call("kubectl_get_by_kind_in_namespace", {"kind": "ingress", "namespace": NS}).output
    assert "legacy.lantern.example" in ingresses and "80, 443" in ingresses and "10.1.2.3" in ingresses
    cron = reader.call("kubectl_get_by_kind_in_namespace", {"kind": "cronjob", "namespace": NS}).output
    row = next(line for line in cron.splitlines() if line.startswith("nightly-report"))
    assert "0 2 * * *" in row and " True " in row
    cron_yaml = reader.call(
        "kubectl_get_yaml", {"kind": "cronjob", "name": "nightly-report", "namespace": NS}
    )
    assert "suspend: true" in cron_yaml.output


def test_an_absent_certificate_crd_is_not_installed_not_an_error(tmp_path: Path) -> None:
    with FixtureServer("kubernetes", {"read-token": {"GET"}}).running() as plain:
        path = kubeconfig(tmp_path / "read.yaml", plain.url, "read-token")
        reader = KubernetesReadToolset(KubernetesConfig(read_kubeconfig=path))
        listed = reader.call("kubectl_get_by_kind_in_cluster", {"kind": "certificate"})
        named = reader.call("kubectl_describe", {"kind": "certificate", "name": "api", "namespace": NS})
    for result in (listed, named):
        assert result.no_data and "cert-manager is not installed" in result.output, result.output
        assert "doesn't have a resource type" in result.output


def test_the_certificate_question_answers_from_a_live_tls_secret_and_a_certificate(
    server: FixtureServer, tmp_path: Path
) -> None:
    reader = _reader(server, tmp_path)
    calls = [
        ("kubectl_get_by_kind_in_cluster", {"kind": "certificate"}),
        ("kubectl_get_by_kind_in_cluster", {"kind": "secret"}),
        *[("kubectl_get_yaml", {"kind": "secret", "name": n, "namespace": NS}) for n in SECRETS],
    ]
    state = AnalysisState(from_text(QUESTION))
    state.intent = classify(QUESTION, anchor=ASKED)
    for tool, params in calls:
        result = reader.call(tool, params)
        out = ToolOutput(tool, params, result.output, ok=result.ok, no_data=result.no_data)
        state.record(out)
        analyze(out, state)
    first, lines = cert_expiry.listed_verdict(state, ASKED)
    assert first.startswith("2 of the "), first
    assert "Secret legacy-tls (namespace shop) expires on 2027-03-12" in first
    assert "api (namespace shop) expires on 2027-03-22" in first
    assert "storefront" not in first and "db-credentials" not in first + "\n".join(lines)
    unknown = "\n".join(lines)
    assert "garbled-tls" in unknown and "huge-tls" in unknown and "unreadable" in unknown


class _Cluster(Environment):
    name = "kubernetes_fixture"

    def __init__(self, reader: KubernetesReadToolset) -> None:
        super().__init__({})
        self.reader = reader

    def read_toolsets(self) -> list[ReadToolset]:
        return [self.reader]


def _ask(server: FixtureServer, tmp_path: Path, *, read_secrets: bool = True) -> Outcome:
    """The agent's answer to QUESTION (asked at ASKED) read from the fixture cluster, its requests
    counted from the question on."""
    alert = from_text(QUESTION)
    alert.asked_at = ASKED
    server.requests.clear()
    reader = _reader(server, tmp_path, read_secrets=read_secrets)
    return investigate(alert=alert, environment=_Cluster(reader), recorder=MemoryRecorder(), mode="analyzers")


def test_the_agent_asked_which_certificates_expire_reads_the_live_cluster(
    server: FixtureServer, tmp_path: Path
) -> None:
    outcome = _ask(server, tmp_path)
    first, *rest = outcome.diagnosis.splitlines()
    assert first.startswith("2 of the 5 certificates expire in the next 30 days"), outcome.diagnosis
    assert "Secret legacy-tls (namespace shop) expires on 2027-03-12" in first
    assert "Ingress legacy serves it for legacy.lantern.example" in first
    assert "api (namespace shop) expires on 2027-03-22" in first
    sources = next(line for line in rest if line.startswith("Sources:"))
    assert "2 cert-manager Certificates listed" in sources and "3 TLS Secrets listed, 3 read" in sources
    assert "could not be listed" not in outcome.diagnosis
    assert {r.path for r in server.requests} >= {"/api/v1/secrets", "/apis/cert-manager.io/v1/certificates"}
    leaked = [f for f in _forbidden() if f in outcome.diagnosis]
    assert not leaked


def test_with_secrets_off_the_answer_says_why_the_tls_secrets_are_unknown(
    server: FixtureServer, tmp_path: Path
) -> None:
    outcome = _ask(server, tmp_path, read_secrets=False)
    first, *rest = outcome.diagnosis.splitlines()
    assert first.startswith("1 of the 3 certificates expires"), outcome.diagnosis
    unknown = next(line for line in rest if line.startswith("Unknown:"))
    assert "Secret legacy-tls (namespace shop)" in unknown and "SKILLGATE_K8S_READ_SECRETS is off" in unknown
    sources = next(line for line in rest if line.startswith("Sources:"))
    assert (
        "TLS Secrets could not be listed (Secrets are not read: SKILLGATE_K8S_READ_SECRETS is off" in sources
    )
    assert not [r for r in server.requests if "/secrets" in r.path]
