"""A URL's host -> the Ingress rule that serves it -> the TLS Secret it terminates with, by the API's fields.

An Ingress serves HTTPS for the hosts of each ``spec.tls`` entry with the certificate in that entry's
``secretName`` (same namespace). A Secret that does not exist makes the controller serve its default
(self-signed) certificate; a Secret whose certificate expired is served expired. cert-manager renews a
Certificate into *its* ``spec.secretName``: when that differs from what the Ingress names, the renewal
lands in a Secret nothing serves (a stale reference, e.g. after a rename), while the Certificate says
Ready.

Reads: the alert's URLs (an ``instance`` label, a description), a blackbox probe's
``probe_ssl_earliest_cert_expiry`` (expired when before the sample's time), Ingress listings (``HOSTS``)
and manifests or describes (``tls``), the namespace's Secrets (``kubernetes.io/tls``) and cert-manager
Certificates (``secretName``, ``dnsNames``, ``notAfter``, Ready). A TLS alert with no namespace leads to the
namespaces and their Ingresses.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    field_value,
    json_payloads,
    parse_table,
    register,
    register_correlator,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import _part, manifest_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

_HOST = rx.compile(r"https://([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)", rx.IGNORECASE)
_TLS_WORDS = rx.compile(r"\b(?:ssl|tls|x509|cert\w*|https)\b", rx.IGNORECASE)
_DESCRIBE_TLS = rx.compile(r"^\s+(\S+)\s+terminates\s+(\S+)", rx.MULTILINE)
_EXPIRY = "probe_ssl_earliest_cert_expiry"
MAX_NAMESPACES = 8


def alert_hosts(state: AnalysisState) -> set[str]:
    """Hosts of the https URLs an alert about TLS names ({} for any other alert)."""
    text = state.alert.as_text()
    if not _TLS_WORDS.search(text):
        return set()
    return {h.lower() for h in _HOST.findall(text)}


def covers(pattern: str, host: str) -> bool:
    """A TLS host or dnsName (``*.example.com`` included) covers ``host``."""
    pattern, host = pattern.lower(), host.lower()
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and host.count(".") == pattern.count(".")
    return pattern == host


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _expiry(text: str, query: str, state: AnalysisState) -> None:
    """Hosts whose probed certificate expired: ``probe_ssl_earliest_cert_expiry`` before the sample's time,
    or (a query of it ``- time()``) seconds left below zero."""
    expired = state.fact_dict("tls_expired_hosts")
    left_query = _EXPIRY in query and "time()" in query
    for payload in json_payloads(text):
        data = payload.get("data") if isinstance(payload, dict) else None
        for series in (data or {}).get("result") or [] if isinstance(data, dict) else []:
            metric, value = series.get("metric") or {}, series.get("value") or []
            name = metric.get("__name__")
            if (name != _EXPIRY and not (left_query and not name)) or len(value) != 2:
                continue
            try:
                now, number = float(value[0]), float(value[1])
            except (TypeError, ValueError):
                continue
            until = number if name == _EXPIRY else now + number
            for host in _HOST.findall(str(metric.get("instance") or "")):
                if until < now:
                    expired[host.lower()] = f"{_EXPIRY} {_when(until)}, before the probe's {_when(now)}"


def _moment(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _keep_ingress(obj: dict[str, Any], namespace: str, state: AnalysisState) -> None:
    meta = _part(obj, "metadata")
    ns = str(meta.get("namespace") or namespace)
    entries = [
        ([str(h) for h in entry.get("hosts") or []], str(entry.get("secretName") or ""))
        for entry in _part(obj, "spec").get("tls") or []
        if isinstance(entry, dict)
    ]
    rules = [
        str(r.get("host"))
        for r in _part(obj, "spec").get("rules") or []
        if isinstance(r, dict) and r.get("host")
    ]
    state.fact_dict("ingress_rule_hosts")[f"{ns}/{meta.get('name') or ''}"] = rules
    _tls(state, ns, str(meta.get("name") or ""), entries)


def _tls(state: AnalysisState, namespace: str, name: str, entries: list[tuple[list[str], str]]) -> None:
    state.fact_dict("ingress_tls")[f"{namespace}/{name}"] = entries
    if entries and namespace:
        state.lead(ObjRef("secret", "*", namespace), f"the TLS Secrets Ingress {name} names", 83)
        state.lead(ObjRef("certificate", "*", namespace), "the Certificates that write those Secrets", 82)


def _keep_certificate(obj: dict[str, Any], namespace: str, state: AnalysisState) -> None:
    meta, spec, status = _part(obj, "metadata"), _part(obj, "spec"), _part(obj, "status")
    ready = next(
        (
            str(c.get("status"))
            for c in status.get("conditions") or []
            if isinstance(c, dict) and c.get("type") == "Ready"
        ),
        "",
    )
    not_after = _moment(str(status.get("notAfter") or ""))
    if not_after is not None and state.alert.asked_at is not None and not_after < state.alert.asked_at:
        for host in spec.get("dnsNames") or []:
            state.fact_dict("tls_expired_hosts").setdefault(
                str(host).lower(), f"Certificate {meta.get('name')} notAfter {status.get('notAfter')}"
            )
    state.fact_dict("certificates")[f"{meta.get('namespace') or namespace}/{meta.get('name')}"] = {
        "secret": str(spec.get("secretName") or ""),
        "hosts": [str(h) for h in spec.get("dnsNames") or []],
        "not_after": str(status.get("notAfter") or ""),
        "ready": ready,
    }


@register
class IngressTlsAnalyzer(Analyzer):
    name = "k8s_ingress_tls"

    def applies(self, out: ToolOutput) -> bool:
        head = out.text[:2000]
        kind = str(out.params.get("kind") or "").lower()
        return (
            _EXPIRY in out.text
            or _EXPIRY in str(out.params.get("query") or "")
            or "HOSTS" in head
            or "kubernetes.io/tls" in out.text
            or "kind: Ingress" in head
            or '"kind": "Ingress"' in head
            or "Certificate" in head
            or "terminates" in out.text
            or kind in ("certificate", "certificates", "namespace", "namespaces", "ns")
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        namespace = str(out.params.get("namespace") or "")
        kind = str(out.params.get("kind") or "").lower()
        if _EXPIRY in out.text or _EXPIRY in str(out.params.get("query") or ""):
            _expiry(out.text, str(out.params.get("query") or ""), state)
        obj = manifest_of(out.text)
        if obj is not None and obj.get("kind") == "Ingress":
            _keep_ingress(obj, namespace, state)
            return []
        if obj is not None and obj.get("kind") == "Certificate":
            _keep_certificate(obj, namespace, state)
            return []
        if "terminates" in out.text and (name := field_value(out.text, "Name")):
            ns = field_value(out.text, "Namespace") or namespace
            _tls(state, ns, name, [(h.split(","), s) for s, h in _DESCRIBE_TLS.findall(out.text)])
            return []
        table = parse_table(out.text)
        if table is None:
            return []
        for row in table.rows:
            if not row:
                continue
            ns = table.column(row, "NAMESPACE") or namespace
            name = row[1] if "NAMESPACE" in table.header and len(row) > 1 else row[0]
            if "HOSTS" in table.header:
                hosts = table.column(row, "HOSTS").lower().split(",")
                if any(covers(h, want) for h in hosts for want in alert_hosts(state)):
                    state.lead(ObjRef("ingress", name, ns), "the Ingress that serves the alert's host", 86)
            elif kind in ("secret", "secrets") or "kubernetes.io/tls" in row:
                state.fact_dict("secrets_listed").setdefault(ns, {})[name] = table.column(row, "AGE")
            elif kind in ("certificate", "certificates"):
                state.lead(ObjRef("certificate", name, ns), "a Certificate that may write the Secret", 80)
        if kind in ("secret", "secrets") and namespace:  # read: a name not listed does not exist
            state.fact_dict("secrets_listed").setdefault(namespace, {})
        return []


@register_correlator
def ingress_serves_stale_secret(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    hosts = alert_hosts(state)
    expired = state.fact_dict("tls_expired_hosts")
    if not hosts and not expired:
        return []
    if hosts and state.alert.subject.namespace:
        state.lead(
            ObjRef("ingress", "*", state.alert.subject.namespace), "Ingresses that may serve the host", 82
        )
    elif hosts and not state.fact_dict("ingress_tls"):
        state.lead(ObjRef("ingress", "*"), "the Ingresses that serve the alert's host", 84)
        state.lead(ObjRef("namespace", "*"), "the namespaces whose Ingresses may serve the host", 83)
        listed = state.fact_set("tls_namespaces_listed")
        for ns in sorted(state.fact_set("namespaces"))[:MAX_NAMESPACES]:
            if ns not in listed:
                listed.add(ns)
                state.lead(ObjRef("ingress", "*", ns), "the Ingresses that serve the alert's host", 82)
    reported = state.fact_set("ingress_tls_reported")
    out: list[Finding] = []
    for label, entries in state.fact_dict("ingress_tls").items():
        namespace, name = label.split("/", 1)
        for tls_hosts, secret in entries:
            wanted = hosts | set(expired)
            served = [h for h in tls_hosts if any(covers(p, h) or covers(h, p) for p in wanted)]
            if not served or not secret:
                continue
            finding = _finding(state, namespace, name, served, secret, expired)
            if finding is not None and finding.summary not in reported:
                reported.add(finding.summary)
                out.append(finding)
        out += _uncovered(state, label, entries, hosts, reported)
    return out


def _uncovered(
    state: AnalysisState,
    label: str,
    entries: list[tuple[list[str], str]],
    hosts: set[str],
    reported: set[str],
) -> list[Finding]:
    """An alert host the Ingress routes (a rule's host) that no tls entry covers: no certificate for it."""
    namespace, name = label.split("/", 1)
    covered = [h for tls_hosts, _ in entries for h in tls_hosts]
    out = []
    for host in state.fact_dict("ingress_rule_hosts").get(label) or []:
        if host.lower() not in hosts or any(covers(c, host) for c in covered):
            continue
        summary = (
            f"The Ingress {name} routes {host} but none of its tls entries covers that host, so HTTPS for it "
            "is answered with the ingress controller's default (self-signed) certificate."
        )
        if summary not in reported:
            reported.add(summary)
            out.append(
                Finding(
                    "ingress_tls_host_uncovered",
                    summary,
                    Severity.CRITICAL,
                    ObjRef("ingress", name, namespace).label,
                    f"tls hosts: {', '.join(covered) or 'none'}",
                    90,
                    f"Add {host} to a tls entry of Ingress {name} (its Secret's certificate must cover it).",
                )
            )
    return out


def _finding(
    state: AnalysisState,
    namespace: str,
    name: str,
    served: list[str],
    secret: str,
    expired: dict[str, str],
) -> Finding | None:
    host = served[0]
    secrets = state.fact_dict("secrets_listed").get(namespace)
    renewed = [
        (cert.split("/", 1)[1], data)
        for cert, data in state.fact_dict("certificates").items()
        if cert.startswith(f"{namespace}/")
        and data["secret"]
        and data["secret"] != secret
        and any(covers(p, host) for p in data["hosts"])
    ]
    subject = ObjRef("ingress", name, namespace).label
    fix = f"Point Ingress {name}'s tls secretName for {host} at the Secret with the current certificate"
    if secrets is not None and secret not in secrets:
        return Finding(
            "ingress_tls_secret_missing",
            f"The Ingress {name} names TLS Secret {secret} for {', '.join(served)}, which does not exist in "
            f"namespace {namespace}: the ingress controller serves its default (self-signed) certificate.",
            Severity.CRITICAL,
            subject,
            f"tls secretName {secret}; Secrets there: {', '.join(sorted(secrets)) or 'none'}",
            92,
            fix + ".",
        )
    why = next((reason for pattern, reason in sorted(expired.items()) if covers(pattern, host)), "")
    if not why:
        return None
    summary = (
        f"The Ingress {name} still serves the TLS Secret {secret} for {', '.join(served)}, whose certificate "
        f"has expired ({why})"
    )
    rank = 88
    if renewed:
        cert, data = renewed[0]
        ready = ", Ready" if data["ready"] == "True" else ""
        until = f", valid until {data['not_after']}" if data["not_after"] else ""
        summary += (
            f"; the renewed certificate (Certificate {cert}{ready}{until}) is in Secret {data['secret']}, "
            "which the Ingress does not reference (a stale reference)"
        )
        fix += f" ({data['secret']})"
        rank = 94
    return Finding(
        "ingress_tls_expired",
        summary + ".",
        Severity.CRITICAL,
        subject,
        f"tls secretName {secret}",
        rank,
        fix + ", or renew the certificate in " + secret + ".",
    )
