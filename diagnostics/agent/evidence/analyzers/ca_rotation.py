"""A client that stops trusting a peer after the peer's CA was rotated.

A TLS client verifies its peer against the CA bundle it was given (a ConfigMap mounted at a path that
``SSL_CERT_FILE`` or the application names). When the issuer of the peer's certificate switches to a new
CA and the certificate is reissued, a client whose bundle holds only the old CA fails with Go's "x509:
certificate signed by unknown authority" (Java's "PKIX path building failed", OpenSSL's "unable to get
local issuer certificate"). Read from the client's log (the peer it dials), the peer's cert-manager
Certificate (when it was reissued, by which issuer), the issuer (its CA) and the client's mounted bundle
(the CAs it holds).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.server_states import line_time
from diagnostics.agent.findings import Finding, ObjRef, Severity

_UNKNOWN_CA = rx.compile(
    r"x509: certificate signed by unknown authority|PKIX path building failed|"
    r"unable to get local issuer certificate|self[- ]signed certificate in certificate chain",
    rx.IGNORECASE,
)
# The in-cluster peer a client dials: https://<service>.<namespace>.svc[.cluster.local][:port]/...
_PEER = rx.compile(
    r"(?:https?://|dial tcp |\")([a-z0-9][-a-z0-9]*)\.([a-z0-9][-a-z0-9]*)\.svc\b", rx.IGNORECASE
)
_CN = rx.compile(r"CN=([\w.-]+)")
_CA_VOLUME = rx.compile(r"Name:\s+([a-z0-9][-a-z0-9.]*(?:ca|trust|bundle|cert)[-a-z0-9.]*)\b")


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _hhmm(moment: str) -> str:
    return moment.replace("T", " ")[11:16]


@register
class CaRotationAnalyzer(Analyzer):
    name = "ca_rotation"

    def applies(self, out: ToolOutput) -> bool:
        return True

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("ca_rotation")
        text = out.text
        if out.is_log:
            line = next((ln for ln in text.splitlines() if _UNKNOWN_CA.search(ln)), "")
            peer = _PEER.search(line) if line else None
            if peer and not facts.get("peer"):
                name, namespace = peer.group(1).lower(), peer.group(2).lower()
                client = str(out.params.get("pod_name") or "")
                facts.update(peer=name, peer_ns=namespace, client=workload_of(client), line=line)
                facts["first"] = line_time(line)
                for cert in (f"{name}-tls", name):
                    state.lead(ObjRef("certificate", cert, namespace), "the peer's certificate", 92)
                client_ns = str(out.params.get("namespace") or "")
                state.lead(ObjRef("deployment", workload_of(client), client_ns), "the client's CA bundle", 91)
                if facts.get("bundle_ref"):
                    state.lead(ObjRef("configmap", *facts["bundle_ref"]), "the CAs the client trusts", 93)
        else:
            self._object(out, state, facts)
        return self._findings(facts)

    @staticmethod
    def _object(out: ToolOutput, state: AnalysisState, facts: dict[str, Any]) -> None:
        text = out.text
        obj = manifest_of(text) if "apiVersion" in text[:2000] else None
        kind = str((obj or {}).get("kind") or "")
        if obj is None:
            if "Mounts:" in text and (volume := _CA_VOLUME.search(text.split("Volumes:", 1)[-1])):
                namespace = str(out.params.get("namespace") or "")
                facts["bundle"] = volume.group(1)
                facts["bundle_ref"] = (volume.group(1), namespace)
                if facts.get("peer"):
                    state.lead(
                        ObjRef("configmap", volume.group(1), namespace), "the CAs the client trusts", 93
                    )
            return
        meta = _meta(obj)
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(status, dict) and isinstance(spec, dict)
        if kind == "Certificate":
            issuer = spec.get("issuerRef") if isinstance(spec.get("issuerRef"), dict) else {}
            assert isinstance(issuer, dict)
            facts["reissued"] = str(status.get("notBefore") or "")
            issuer_kind = str(issuer.get("kind") or "Issuer").lower()
            namespace = "" if issuer_kind == "clusterissuer" else str(meta.get("namespace") or "")
            if issuer.get("name"):
                state.lead(ObjRef(issuer_kind, str(issuer["name"]), namespace), "who signs the peer", 93)
        elif kind in ("ClusterIssuer", "Issuer"):
            subject = _CN.search(text)
            ca = spec.get("ca") if isinstance(spec.get("ca"), dict) else {}
            assert isinstance(ca, dict)
            facts["ca"] = subject.group(1) if subject else str(ca.get("secretName") or "")
        elif kind == "ConfigMap" and ("BEGIN CERTIFICATE" in text or "CN=" in text):
            facts["bundle"] = str(meta.get("name") or facts.get("bundle") or "")
            facts["trusted"] = sorted(set(_CN.findall(text)))

    @staticmethod
    def _findings(facts: dict[str, Any]) -> list[Finding]:
        found: list[Finding] = []
        peer, client, ca = facts.get("peer"), facts.get("client"), facts.get("ca")
        if peer and ca and facts.get("reissued") and not facts.get("reported_peer"):
            facts["reported_peer"] = True
            found.append(
                Finding(
                    "peer_ca_rotated",
                    f"{client} fails to call {peer} with x509: certificate signed by unknown authority: the "
                    f"certificate of {peer} was reissued at {_hhmm(facts['reissued'])} ({facts['reissued']}) "
                    f"by the rotated CA {ca}.",
                    Severity.CRITICAL,
                    f"deployment/{client}",
                    str(facts.get("line") or "")[:300],
                    88,
                    f"Add the new CA {ca} to the trust bundle {client} mounts (keep the old one until "
                    "every certificate is reissued), then restart it.",
                )
            )
        trusted = facts.get("trusted") or []
        if peer and ca and trusted and ca not in trusted and not facts.get("reported_bundle"):
            facts["reported_bundle"] = True
            held = ", ".join(trusted)
            found.append(
                Finding(
                    "trust_bundle_stale",
                    f"The trust bundle ConfigMap {facts.get('bundle')} that {client} mounts holds only the "
                    f"old CA {held}, not {ca}, which now signs {peer}.",
                    Severity.CRITICAL,
                    f"configmap/{facts.get('bundle')}",
                    f"CN={held}",
                    87,
                )
            )
        return found
