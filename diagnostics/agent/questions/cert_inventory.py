"""Every certificate a cluster shows, from each source that shows one, merged so that one certificate counts
once (which certificates expire, ``cert_expiry``):

- cert-manager Certificates: the listing (its ``SECRET`` column), each one's own read (``notAfter``,
  ``secretName``, conditions);
- TLS Secrets (``kubernetes.io/tls``): the listing (``TYPE``), each one's ``tls.crt`` (``cert_sources``);
  a Secret a Certificate writes (its ``secretName``, or the Secret's ``cert-manager.io/certificate-name``
  annotation) is that Certificate, not a second certificate;
- Ingresses: each ``tls`` entry names the Secret served for its hosts (an entry whose Secret does not exist,
  when the Secrets were listed, is said: the controller serves its default certificate);
- the expiry metrics: cert-manager's (by Certificate) and the blackbox exporter's (by probed host: the
  certificate whose hosts cover it, else the endpoint on its own).

Where sources disagree on one certificate's expiry the earliest is kept. Each source is reported as read,
empty, absent (cert-manager not installed), failed or not read: what was not read is unknown, never "none".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.evidence.analyzers.kubernetes.ingress_tls import covers
from diagnostics.agent.questions import certificates
from diagnostics.agent.questions.asked import TableRow, parse_tables
from diagnostics.agent.questions.cert_sources import (
    EXPIRY_METRICS,
    TLS_TYPE,
    SecretCert,
    from_metrics,
    secret_certs,
)
from diagnostics.agent.questions.certificates import CERT_KINDS, CertFacts, facts_of, parse_moment

READ, EMPTY, ABSENT, FAILED, UNREAD = "read", "empty", "absent", "failed", "not read"
_ABSENT = rx.compile(
    r"(?i)doesn't have a resource type|no matches for kind|could not find the requested resource"
)
_NONE_FOUND = rx.compile(r"(?i)\bno resources found\b")
_SECRET_NAME = rx.compile(r"(?m)^\s*(?:secretName|Secret Name):\s*[\"']?([a-z0-9][-a-z0-9.]*)")
_CERTISH = rx.compile(r"tls|cert|ssl|x509")
_EXPIRY_COLUMN = rx.compile(r"NOT.?AFTER|EXPIR|VALID.?(?:UNTIL|TO)|ENDDATE")
_KINDS = {"certificates": "certificate", "cert": "certificate", "certs": "certificate", "secrets": "secret"}
_KINDS |= {"ingresses": "ingress", "ing": "ingress"}
# How many objects (Certificates, Ingresses, Secrets) a listing question reads one by one for their expiry;
# the rest are named unread.
READ_BUDGET = 15
Key = tuple[str, str, str]  # (kind, namespace, name)
_FAILED_READ = "its read failed"


@dataclass
class Entry:
    """One certificate, whichever sources showed it."""

    kind: str  # "certificate" | "secret" | "endpoint"
    namespace: str
    name: str
    facts: CertFacts
    secret: str = ""  # a Certificate's Secret
    served: list[str] = field(default_factory=list)  # "Ingress web serves it for a.example"
    problem: str = ""  # why no expiry could be read, when that is known

    @property
    def label(self) -> str:
        """How the answer names it, on one line (a name read from a Secret or a metric is untrusted)."""
        name, namespace = " ".join(self.name.split())[:253], " ".join(self.namespace.split())[:63]
        where = f" (namespace {namespace})" if namespace else ""
        if self.kind == "secret":
            return f"Secret {name}{where}"
        if self.kind == "endpoint":
            return f"the certificate served at {name}"
        return f"{name}{where}"

    def merge(self, when: datetime | None, hosts: Sequence[str] = ()) -> None:
        if when is not None and (self.facts.not_after is None or when < self.facts.not_after):
            self.facts.not_after = when
        self.facts.hosts = list(dict.fromkeys([*self.facts.hosts, *hosts]))[:20]


@dataclass(frozen=True)
class Source:
    name: str  # how it is named when it was not read
    state: str
    said: str


def _kind(out: ToolOutput) -> str:
    kind = str(out.params.get("kind") or "").lower()
    return _KINDS.get(kind, kind)


def expiries(state: AnalysisState) -> dict[tuple[str, str], CertFacts]:
    """The facts read of each cert-manager Certificate, by (namespace, name): its own reads (YAML,
    describe), else a listing's column that prints its expiry."""
    facts: dict[tuple[str, str], CertFacts] = {}
    for out in state.outputs:
        if not out.ok or out.no_data or str(out.params.get("kind") or "").lower() not in CERT_KINDS:
            continue
        if out.params.get("name"):
            key = (str(out.params.get("namespace") or ""), str(out.params["name"]))
            read = facts_of(out)
            if read is not None:
                kept = facts.setdefault(key, read)
                kept.not_after = kept.not_after or read.not_after
                kept.failing = list(dict.fromkeys([*kept.failing, *read.failing]))
                kept.attempts = max(kept.attempts, read.attempts)
                kept.hosts = list(dict.fromkeys([*kept.hosts, *read.hosts]))
            continue
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or "")):
            key = (row.values.get("NAMESPACE") or row.namespace, row.name)
            for column, value in row.values.items():
                if _EXPIRY_COLUMN.search(column.upper()) and (moment := parse_moment(value)) is not None:
                    label = f"{row.name}{f' (namespace {key[0]})' if key[0] else ''}"
                    facts.setdefault(key, CertFacts(label, not_after=moment))
    return facts


def _listings(state: AnalysisState, kind: str, namespace: str) -> list[ToolOutput]:
    return [
        out
        for out in state.outputs
        if _kind(out) == kind
        and not out.params.get("name")
        and not out.params.get("keyword")
        and (not namespace or out.params.get("namespace") in (None, "", namespace))
    ]


def _rows(outs: list[ToolOutput], namespace: str = "") -> list[TableRow]:
    """The rows of ``outs`` (of ``namespace`` only, when one is asked)."""
    return [
        row
        for out in outs
        if out.ok and not out.no_data
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or ""))
        if row.name and (not namespace or _where(row)[0] == namespace)
    ]


def _where(row: TableRow) -> tuple[str, str]:
    return row.values.get("NAMESPACE") or row.namespace, row.name


def _state_of(outs: list[ToolOutput], rows: int) -> tuple[str, str]:
    """(state, the first line of the error) of a source's listings."""
    if any(out.ok for out in outs):
        return (READ if rows else EMPTY), ""
    if any(_ABSENT.search(out.text[:500]) for out in outs):
        return ABSENT, ""
    if outs:
        error = next((line.strip() for line in outs[0].text.splitlines() if line.strip()), "no output")
        return FAILED, error[:160]
    return UNREAD, ""


def tls_secrets_listed(state: AnalysisState, namespace: str = "") -> tuple[list[tuple[str, str]], str, str]:
    """((namespace, name) of each TLS Secret listed, state, error). A listing without a ``TYPE`` column
    counts the Secrets named for a certificate (``-tls``, ``cert``)."""
    rows = _rows(_listings(state, "secret", namespace), namespace)
    found = [
        _where(row)
        for row in rows
        if row.values.get("TYPE") == TLS_TYPE or ("TYPE" not in row.values and _CERTISH.search(row.name))
    ]
    listed_state, error = _state_of(_listings(state, "secret", namespace), len(found))
    return list(dict.fromkeys(found)), listed_state, error


def _secret_listed(state: AnalysisState, namespace: str) -> set[tuple[str, str]] | None:
    """Every Secret (of any type) a listing that covers ``namespace`` returned; None when none covers it."""
    covering = [
        out
        for out in _listings(state, "secret", "")
        if out.ok and out.params.get("namespace") in (None, "", namespace)
    ]
    return {_where(row) for row in _rows(covering)} if covering else None


def secrets_read(state: AnalysisState) -> dict[tuple[str, str], SecretCert]:
    """Each TLS Secret a read showed, by (namespace, name): its certificate, or why it is unreadable."""
    found: dict[tuple[str, str], SecretCert] = {}
    for out in state.outputs:
        if _kind(out) != "secret":
            continue
        namespace, name = str(out.params.get("namespace") or ""), str(out.params.get("name") or "")
        if not out.ok or out.no_data:
            if name:
                why = f"{_FAILED_READ}: {' '.join(out.text.split())[:120]}"
                found.setdefault((namespace, name), SecretCert(namespace, name, None, problem=why))
            continue
        for secret in secret_certs(out.text, namespace):
            key = (secret.namespace, secret.name or name)
            if secret.problem:
                secret = replace(secret, problem=f"unreadable ({secret.problem})")
            if key not in found or found[key].not_after is None:
                found[key] = secret
    return found


def _secret_of(state: AnalysisState, rows: list[TableRow]) -> dict[tuple[str, str], str]:
    """The Secret each Certificate writes: the listing's ``SECRET`` column, its own read's ``secretName``."""
    links = {_where(row): row.values["SECRET"] for row in rows if row.values.get("SECRET")}
    for out in state.outputs:
        named = _kind(out) == "certificate" and out.ok and out.params.get("name")
        if named and (match := _SECRET_NAME.search(out.text[:100_000])):
            links.setdefault(
                (str(out.params.get("namespace") or ""), str(out.params["name"])), match.group(1)
            )
    return links


def metrics_read(
    state: AnalysisState,
) -> tuple[list[tuple[str, str, str, datetime, tuple[str, ...]]], str, str]:
    """((metric, namespace, name, expiry, hosts) of each series, state, error) of the expiry metrics."""
    outs = [
        out for out in state.outputs if any(m in str(out.params.get("query") or "") for m in EXPIRY_METRICS)
    ]
    series = [
        (held.metric, held.namespace, held.name, held.not_after, held.hosts)
        for out in outs
        if out.ok and not out.no_data
        for held in from_metrics(out.text)
    ]
    series_state, error = _state_of(outs, len(series))
    return series, series_state, error


def _ingress_tls(state: AnalysisState, namespace: str) -> list[tuple[str, str, list[str], str]]:
    """(namespace, ingress, hosts, secret) of each Ingress tls entry read (the ingress analyzer's facts)."""
    entries = []
    for label, tls in state.fact_dict("ingress_tls").items():
        ns, name = label.split("/", 1)
        if not namespace or ns == namespace:
            entries += [(ns, name, [str(h) for h in hosts][:10], str(secret)) for hosts, secret in tls]
    return entries


def inventory(state: AnalysisState, namespace: str = "") -> tuple[list[Entry], list[Source]]:
    """Every certificate the reads show (of ``namespace``, when one is asked), each once, and what each
    source returned."""
    entries: dict[Key, Entry] = {}
    cert_outs = _listings(state, "certificate", namespace)
    cert_rows = _rows(cert_outs, namespace)
    read = expiries(state)
    links = _secret_of(state, cert_rows)
    for ns, name in dict.fromkeys([*certificates.found(state), *read]):
        if namespace and ns != namespace:
            continue
        facts = read.get((ns, name)) or CertFacts(name)
        entries[("certificate", ns, name)] = Entry("certificate", ns, name, facts, links.get((ns, name), ""))
    owner = {(e.namespace, e.secret): k for k, e in entries.items() if e.secret}
    listed, secrets_state, secrets_error = tls_secrets_listed(state, namespace)
    secrets = {k: held for k, held in secrets_read(state).items() if not namespace or k[0] == namespace}
    for ns, name in dict.fromkeys([*listed, *secrets]):
        held = secrets.get((ns, name))
        key: Key = owner.get((ns, name)) or ("secret", ns, name)
        if held is not None and ("certificate", ns, held.certificate) in entries:
            key = ("certificate", ns, held.certificate)  # its annotation: the Certificate that writes it
        entry = entries.setdefault(key, Entry("secret", ns, name, CertFacts(name)))
        if held is not None:
            entry.merge(held.not_after, held.hosts)
            if held.problem and entry.facts.not_after is None:
                whose = "" if entry.kind == "secret" else f"its Secret {name}: "
                entry.problem = entry.problem or f"{whose}{held.problem}"
    for ns, ingress, hosts, secret in _ingress_tls(state, namespace):
        if not secret:
            continue
        key = owner.get((ns, secret)) or ("secret", ns, secret)
        if key not in entries:
            entries[key] = Entry("secret", ns, secret, CertFacts(secret))
            every = _secret_listed(state, ns)
            if every is not None and (ns, secret) not in every and (ns, secret) not in secrets:
                entries[key].problem = (
                    f"it does not exist, yet Ingress {ingress} names it: the ingress controller serves its "
                    "default (self-signed) certificate"
                )
        entries[key].served.append(f"Ingress {ingress} serves it for {', '.join(hosts[:3]) or 'its hosts'}")
        entries[key].merge(None, hosts)
    series, metrics_state, metrics_error = metrics_read(state)
    for metric, ns, name, when, probed in series:
        if metric == EXPIRY_METRICS[0]:
            if namespace and ns != namespace:
                continue
            entries.setdefault(("certificate", ns, name), Entry("certificate", ns, name, CertFacts(name)))
            entries[("certificate", ns, name)].merge(when)
            continue
        covering = [e for e in entries.values() if any(covers(p, h) for p in e.facts.hosts for h in probed)]
        if covering:
            covering[0].merge(when)
        elif not namespace:
            entries.setdefault(("endpoint", "", name), Entry("endpoint", "", name, CertFacts(name))).merge(
                when
            )
    ingress_outs = _listings(state, "ingress", namespace)
    ingress_rows = _rows(ingress_outs, namespace)
    with_tls = {(ns, ing) for ns, ing, _, secret in _ingress_tls(state, namespace)}
    sources = [
        _certificates_source(*_state_of(cert_outs, len(cert_rows)), len({_where(r) for r in cert_rows})),
        _secrets_source(
            secrets_state,
            secrets_error,
            len(listed),
            sum(1 for held in secrets.values() if not held.problem.startswith(_FAILED_READ)),
        ),
        _ingress_source(*_state_of(ingress_outs, len(ingress_rows)), len(with_tls), len(ingress_rows)),
        _metrics_source(metrics_state, metrics_error, len(series)),
    ]
    return list(entries.values()), sources


def _s(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _certificates_source(state: str, error: str, count: int) -> Source:
    said = {
        READ: f"{_s(count, 'cert-manager Certificate', 'cert-manager Certificates')} listed",
        EMPTY: "no cert-manager Certificate",
        ABSENT: "cert-manager is not installed (no Certificate kind)",
        FAILED: f"cert-manager Certificates could not be listed ({error})",
        UNREAD: "cert-manager Certificates were not listed",
    }[state]
    return Source("cert-manager Certificates", state, said)


def _secrets_source(state: str, error: str, listed: int, read: int) -> Source:
    said = {
        READ: f"{_s(listed, 'TLS Secret', 'TLS Secrets')} listed, {read} read",
        EMPTY: "no TLS Secret",
        ABSENT: f"TLS Secrets could not be listed ({error or 'no Secret kind'})",
        FAILED: f"TLS Secrets could not be listed ({error})",
        UNREAD: "TLS Secrets were not listed" + (f" ({read} read by name)" if read else ""),
    }[state]
    return Source("TLS Secrets", FAILED if state == ABSENT else state, said)


def _ingress_source(state: str, error: str, with_tls: int, listed: int) -> Source:
    said = {
        READ: f"{_s(with_tls, 'Ingress', 'Ingresses')} with TLS of {listed} listed",
        EMPTY: "no Ingress",
        ABSENT: "no Ingress kind",
        FAILED: f"Ingresses could not be listed ({error})",
        UNREAD: "Ingresses were not listed",
    }[state]
    return Source("Ingresses", state, said)


def _metrics_source(state: str, error: str, count: int) -> Source:
    said = {
        READ: f"the expiry metrics: {_s(count, 'series', 'series')}",
        EMPTY: "no expiry metric series (no exporter publishes them)",
        ABSENT: f"the expiry metrics could not be queried ({error or 'absent'})",
        FAILED: f"the expiry metrics could not be queried ({error})",
        UNREAD: "the expiry metrics were not read",
    }[state]
    return Source("the expiry metrics", FAILED if state == ABSENT else state, said)


def unknown_sources(sources: list[Source]) -> str:
    """What was not read, said as unknown ("" when every source was read)."""
    failed = [s.said for s in sources if s.state == FAILED]
    unread = [s.name for s in sources if s.state == UNREAD]
    if unread:
        names = unread[0] if len(unread) == 1 else f"{', '.join(unread[:-1])} and {unread[-1]}"
        failed.append(f"{names} were not read")
    return f"{'; '.join(failed)}, so they are unknown" if failed else ""


def to_read(state: AnalysisState, namespace: str = "") -> list[Key]:
    """The objects whose own read would show an expiry, in order (Certificates, Ingresses with TLS, the
    Secrets Ingresses name, the other TLS Secrets), within ``READ_BUDGET`` objects read in all;
    a Certificate or an Ingress read once comes again (its describe), never counted twice."""
    done = {
        (_kind(out), str(out.params.get("namespace") or ""), str(out.params["name"]))
        for out in state.outputs
        if _kind(out) in ("certificate", "secret", "ingress") and out.params.get("name")
    }
    entries, _ = inventory(state, namespace)
    unknown = [e for e in entries if e.facts.not_after is None and not e.problem]
    known_ingress = {tuple(label.split("/", 1)) for label in state.fact_dict("ingress_tls")}
    ingresses = [
        ("ingress", *_where(row))
        for row in _rows(_listings(state, "ingress", namespace), namespace)
        if "443" in row.values.get("PORTS", "443") and _where(row) not in known_ingress
    ]
    wanted: list[Key] = [("certificate", e.namespace, e.name) for e in unknown if e.kind == "certificate"]
    wanted += [  # a Certificate read without an expiry: the Secret it writes holds the certificate itself
        ("secret", e.namespace, e.secret)
        for e in unknown
        if e.kind == "certificate" and e.secret and ("certificate", e.namespace, e.name) in done
    ]
    wanted += ingresses
    wanted += [("secret", e.namespace, e.name) for e in unknown if e.kind == "secret" and e.served]
    wanted += [("secret", e.namespace, e.name) for e in unknown if e.kind == "secret" and not e.served]
    wanted = list(dict.fromkeys(wanted))
    again = [k for k in wanted if k in done and k[0] != "secret"]
    fresh = [k for k in wanted if k not in done]
    return again + fresh[: max(0, READ_BUDGET - len(done))]
