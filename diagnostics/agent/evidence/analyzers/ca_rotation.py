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
# A describe's ConfigMap volume ('Type: ConfigMap (...)' then 'Name: <configmap>'; a Secret volume's line is
# 'SecretName:', a projected one's 'ConfigMapName:', neither a bundle this names) whose name says CA.
_CA_VOLUME = rx.compile(
    r"Type:\s+ConfigMap\b[^\n]*\n\s+Name:\s+([a-z0-9][-a-z0-9.]*(?:ca|trust|bundle|cert)[-a-z0-9.]*)\b"
)
UNNAMED = "its name was not observed"


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
                if client:
                    state.lead(
                        ObjRef("deployment", workload_of(client), client_ns), "the client's CA bundle", 91
                    )
                if facts.get("bundle_ref"):
                    state.lead(ObjRef("configmap", *facts["bundle_ref"]), "the CAs the client trusts", 93)
        else:
            self._object(out, state, facts)
        return self._findings(facts)

    @staticmethod
    def _object(out: ToolOutput, state: AnalysisState, facts: dict[str, Any]) -> None:
        """Record what each read shows, under the name it was read by: Certificates (by name), issuers
        (by kind and name), CA bundles (ConfigMaps holding certificates) and the bundle a describe mounts.
        Which of them are the peer's is judged in ``_findings``, from the objects' own fields."""
        text = out.text
        obj = manifest_of(text) if "apiVersion" in text[:2000] else None
        kind = str((obj or {}).get("kind") or "")
        if obj is None:
            if "Mounts:" in text and (volume := _CA_VOLUME.search(text.split("Volumes:", 1)[-1])):
                namespace = str(out.params.get("namespace") or "")
                facts["bundle_ref"] = (volume.group(1), namespace)
                if facts.get("peer"):
                    state.lead(
                        ObjRef("configmap", volume.group(1), namespace), "the CAs the client trusts", 93
                    )
            return
        meta = _meta(obj)
        name = str(meta.get("name") or "")
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(status, dict) and isinstance(spec, dict)
        if kind == "Certificate" and name:
            issuer = spec.get("issuerRef") if isinstance(spec.get("issuerRef"), dict) else {}
            assert isinstance(issuer, dict)
            issuer_kind = str(issuer.get("kind") or "Issuer").lower()
            namespace = str(meta.get("namespace") or out.params.get("namespace") or "")
            issuer_ns = "" if issuer_kind == "clusterissuer" else namespace
            issuer_name = str(issuer.get("name") or "")
            dns = spec.get("dnsNames") if isinstance(spec.get("dnsNames"), list) else []
            facts.setdefault("certs", {})[name] = {
                "namespace": namespace,
                "secret": str(spec.get("secretName") or ""),
                "dns": [str(d).lower() for d in dns or []],
                "issuer": (issuer_kind, issuer_name),
                "reissued": str(status.get("notBefore") or ""),
            }
            if issuer_name:
                state.lead(ObjRef(issuer_kind, issuer_name, issuer_ns), "who signs the peer", 93)
        elif kind in ("ClusterIssuer", "Issuer") and name:
            subject = _CN.search(text)
            ca = spec.get("ca") if isinstance(spec.get("ca"), dict) else {}
            assert isinstance(ca, dict)
            # The CA by its subject's CN when the issuer shows it; else only the Secret that holds it.
            facts.setdefault("issuers", {})[(kind.lower(), name)] = {
                "cn": subject.group(1) if subject else "",
                "secret": str(ca.get("secretName") or ""),
            }
        elif kind == "ConfigMap" and name and ("BEGIN CERTIFICATE" in text or "CN=" in text):
            namespace = str(meta.get("namespace") or out.params.get("namespace") or "")
            facts.setdefault("bundles", {})[(name, namespace)] = sorted(set(_CN.findall(text)))

    @staticmethod
    def _peer_cert(facts: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The Certificate read that the peer serves: its dnsNames hold the peer's service name; one
        without dnsNames counts when it is named for the peer (<peer>-tls, <peer>) in the peer's
        namespace. None when no Certificate read is the peer's."""
        peer, peer_ns = facts.get("peer"), facts.get("peer_ns")
        hosts = {f"{peer}.{peer_ns}.svc", f"{peer}.{peer_ns}.svc.cluster.local", f"{peer}.{peer_ns}"}
        for name, cert in (facts.get("certs") or {}).items():
            if cert["namespace"] not in ("", peer_ns):
                continue
            if hosts & set(cert["dns"]) or (not cert["dns"] and name in (peer, f"{peer}-tls")):
                return name, cert
        return None

    @classmethod
    def _findings(cls, facts: dict[str, Any]) -> list[Finding]:
        """Only objects read are named: the peer's Certificate (by name, when one read is the peer's),
        the CA its issuer shows, the bundle the client mounts. Where the peer's Certificate, or the CA's
        subject, was not observed, the finding says so instead of a name."""
        found: list[Finding] = []
        peer, client = facts.get("peer"), facts.get("client") or "the client"
        if not peer:
            return found
        owned = cls._peer_cert(facts)
        cert_name, cert = owned if owned else ("", {})
        issuers: dict[tuple[str, str], dict[str, str]] = facts.get("issuers") or {}
        if cert:
            signer_ref: tuple[str, str] | None = tuple(cert["issuer"])
        else:  # the peer's Certificate not read: the one issuer read, if one, not tied to the peer
            signer_ref = next(iter(issuers)) if len(issuers) == 1 else None
        issuer = issuers.get(signer_ref) if signer_ref else None
        ca = (issuer or {}).get("cn", "")
        signer_kind = "ClusterIssuer" if signer_ref and signer_ref[0] == "clusterissuer" else "Issuer"
        signer = f"{signer_kind} {signer_ref[1]}" if signer_ref else ""
        if cert and issuer and cert["reissued"] and not facts.get("reported_peer"):
            facts["reported_peer"] = True
            named = ca or f"held in Secret {issuer['secret']} (its subject was not observed)"
            found.append(
                Finding(
                    "peer_ca_rotated",
                    f"{client} fails to call {peer} with x509: certificate signed by unknown authority: the "
                    f"certificate of {peer} was reissued at {_hhmm(cert['reissued'])} ({cert['reissued']}) "
                    f"by the rotated CA {named} (Certificate {cert['namespace']}/{cert_name}, signed by "
                    f"{signer}).",
                    Severity.CRITICAL,
                    f"deployment/{client}",
                    str(facts.get("line") or "")[:300],
                    88,
                    f"Add the new CA {named} to the trust bundle {client} mounts (keep the old one until "
                    "every certificate is reissued), then restart it.",
                )
            )
        mounted = tuple(facts.get("bundle_ref") or ())
        bundles: dict[tuple[str, str], list[str]] = facts.get("bundles") or {}
        # The bundle the client mounts, when its describe was read; else the one CA bundle read.
        key = mounted if mounted in bundles else None
        if key is None and not mounted and len(bundles) == 1:
            key = next(iter(bundles))
        trusted = bundles.get(key, []) if key else []
        if key and ca and trusted and ca not in trusted and not facts.get("reported_bundle"):
            facts["reported_bundle"] = True
            held = ", ".join(trusted)
            how = "that" if key == mounted else "(whether it is the one it mounts was not observed) that"
            signs = (
                f"which now signs {peer}'s certificate {cert_name}"
                if cert
                else f"the CA of {signer} (a certificate {peer} serves is signed by a CA {client} does not "
                f"trust; {UNNAMED}, nor which CA signs it)"
            )
            found.append(
                Finding(
                    "trust_bundle_stale",
                    f"The trust bundle ConfigMap {key[0]} {how} {client} mounts holds only the old CA "
                    f"{held}, not {ca}, {signs}.",
                    Severity.CRITICAL,
                    f"configmap/{key[0]}",
                    f"CN={held}",
                    87,
                )
            )
        return found
