"""A question about a TLS certificate ("is the certificate for api.example.net about to expire?"), read the
way the certificate's own sources print it: cert-manager's Certificate (``status.notAfter``,
``renewalTime``, its ``Ready``/``Issuing`` conditions, ``failedIssuanceAttempts``, ``lastFailureTime``; the
``describe`` spelling of each), ``openssl x509`` (``notAfter=Dec 11 06:00:00 2026 GMT``, ``Not After :``),
and annotations or fields that name an expiry. When it expires is compared with when the question was asked
(never the wall clock of a replay); a renewal that keeps failing is said with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import yaml

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.questions.asked import parse_tables
from diagnostics.agent.questions.cert_sources import held_in
from diagnostics.agent.request.names import CHAT_WORDS, QUESTION_WORDS

if TYPE_CHECKING:
    from diagnostics.agent.request.timewindow import TimeWindow

ASKS = rx.compile(r"\b(?:certificates?|certs?|tls|ssl|x\.?509|https)\b")
_HOST = rx.compile(r"\b((?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\.)+[a-z]{2,})\b")
_NAMED = (
    rx.compile(
        r"\b(?:certificates?|certs?)\s+(?:for\s+|of\s+|named\s+)?[`'\"]?([a-z0-9][-a-z0-9.]*[a-z0-9])"
    ),
    rx.compile(r"[`'\"]?([a-z0-9][-a-z0-9.]*[a-z0-9])[`'\"]?\s+(?:tls\s+)?(?:certificates?|certs?)\b"),
    # An object named for what it holds ("gateway-tls", "api-cert", "tls-ingress"): a TLS Secret or
    # Certificate asked about without the word "certificate". The word ends the name (or, tls/ssl, starts
    # it): "personal-certs-validator" is a workload that validates certificates, not one.
    rx.compile(
        r"(?:^|[\s`'\"(])([a-z0-9][-a-z0-9.]*-(?:tls|ssl|certs?|x509)|(?:tls|ssl)-[a-z0-9][-a-z0-9]*)"
        r"(?:$|[^-a-z0-9.])"
    ),
)
_NOT_NAMES = (
    frozenset(
        """the a an my our this that its tls ssl https is are for of which what x509 expire expires
    expiring expired valid renew renewed renewing about going still healthy ok okay fine good due soon lapse
    lapses lapsing every each there""".split()
    )
    | QUESTION_WORDS
    | CHAT_WORDS
)
_EXPIRY = rx.compile(
    r"(?i)(?:^|[\s\"'{,])(not\s?after|not_after|notafter|expir\w*|valid\s?(?:until|to)|enddate)[\"']?\s*[:=]\s*"
    r"[\"']?([^\"',}\n]+)"
)
_RENEWAL = rx.compile(r"(?i)(?:^|[\s\"'{,])renewal\s?time[\"']?\s*[:=]\s*[\"']?([^\"',}\n]+)")
_ATTEMPTS = rx.compile(r"(?i)failed\s?issuance\s?attempts[\"']?\s*[:=]\s*(\d+)")
_LAST_FAILURE = rx.compile(r"(?i)last\s?failure\s?time[\"']?\s*[:=]\s*[\"']?([^\"',}\n]+)")
_OPENSSL = rx.compile(r"^([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{2}):(\d{2}):(\d{2})\s+(\d{4})(?:\s+(?:GMT|UTC))?$")
_MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
_ISO = rx.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2}))?)?")
SOON = timedelta(days=30)  # without a renewal time: the common alerting threshold for "about to expire"
CERT_KINDS = ("certificate",)


def asked_names(text: str) -> list[str]:
    """The hosts and certificate names a question about a certificate names; [] when it is not about one."""
    lowered = " ".join(text.lower().split())
    if not ASKS.search(lowered):
        return []
    names = [m.group(1) for m in _HOST.finditer(lowered)]
    for pattern in _NAMED:
        for match in pattern.finditer(lowered):
            if match.group(1) not in _NOT_NAMES and len(match.group(1)) > 2:
                names.append(match.group(1))
    return list(dict.fromkeys(names))


def lookups(name: str) -> list[str]:
    """The keywords a certificate for ``name`` is looked up by: the name, a host's dashed form
    (``api.example.net`` -> ``api-example-net``, how certificates are often named), its first label."""
    forms = [name]
    if "." in name:
        forms += [name.replace(".", "-"), name.split(".", 1)[0]]
    return [f for f in dict.fromkeys(forms) if len(f) > 1]


def found(state: AnalysisState) -> list[tuple[str, str]]:
    """(namespace, name) of each certificate a finder or listing returned."""
    rows: dict[tuple[str, str], None] = {}
    for out in state.outputs:
        if out.no_data or not out.ok or str(out.params.get("kind") or "").lower() not in CERT_KINDS:
            continue
        if out.params.get("name"):
            continue
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or "")):
            if row.name and not row.name.startswith("#"):
                rows.setdefault((row.values.get("NAMESPACE") or row.namespace, row.name), None)
    return list(rows)


def parse_moment(value: str) -> datetime | None:
    """A moment as the sources print it: ISO 8601 / RFC 3339, openssl's ``Dec 11 06:00:00 2026 GMT``."""
    value = " ".join(value.strip().strip("\"'").split())
    if match := _ISO.match(value):
        y, mo, d, h, mi, s = (int(g) if g else 0 for g in match.groups())
        try:
            return datetime(y, mo, d, h, mi, s, tzinfo=UTC)
        except ValueError:
            return None
    if (match := _OPENSSL.match(value)) and match.group(1) in _MONTHS:
        month = _MONTHS.index(match.group(1)) + 1
        day, h, mi, s, y = (int(match.group(i)) for i in (2, 3, 4, 5, 6))
        try:
            return datetime(y, month, day, h, mi, s, tzinfo=UTC)
        except ValueError:
            return None
    return None


@dataclass
class CertFacts:
    """What the reads say about one certificate."""

    label: str
    not_after: datetime | None = None
    renewal: datetime | None = None
    attempts: int = 0
    last_failure: str = ""
    failing: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)


def _conditions(text: str) -> list[dict[str, str]]:
    """The status conditions of a YAML document, or of a describe's ``Conditions:`` blocks."""
    try:
        doc: Any = (
            yaml.safe_load(text) if len(text) < 200_000 and text.lstrip().startswith("apiVersion") else None
        )
    except yaml.YAMLError:
        doc = None
    if isinstance(doc, dict):
        status = doc.get("status") if isinstance(doc.get("status"), dict) else {}
        found = status.get("conditions") if isinstance(status, dict) else None
        return [{k: str(v) for k, v in c.items()} for c in found or [] if isinstance(c, dict)]
    conditions, current = [], {}
    for line in text.splitlines():
        match = rx.match(r"^\s+(Last Transition Time|Message|Reason|Status|Type):\s*(.*)$", line)
        if match is None:
            continue
        key = {"Last Transition Time": "lastTransitionTime"}.get(match.group(1), match.group(1).lower())
        current[key] = match.group(2).strip()
        if key == "type":
            conditions.append(current)
            current = {}
    return conditions


def facts_of(out: ToolOutput) -> CertFacts | None:
    """The certificate facts of one read; None when it says nothing about an expiry or a renewal."""
    text = out.text
    name = str(out.params.get("name") or out.params.get("host") or out.params.get("keyword") or "")
    namespace = str(out.params.get("namespace") or "")
    facts = CertFacts(f"{name}{f' (namespace {namespace})' if namespace else ''}" or out.tool)
    for line in text.splitlines():
        if (match := _EXPIRY.search(line)) and (moment := parse_moment(match.group(2))):
            facts.not_after = facts.not_after or moment
        if (match := _RENEWAL.search(line)) and (moment := parse_moment(match.group(1))):
            facts.renewal = facts.renewal or moment
        if match := _ATTEMPTS.search(line):
            facts.attempts = max(facts.attempts, int(match.group(1)))
        if match := _LAST_FAILURE.search(line):
            facts.last_failure = match.group(1).strip()
    for condition in _conditions(text):
        if condition.get("type") in ("Ready", "Issuing") and condition.get("status") == "False":
            reason = condition.get("reason") or ""
            if condition.get("type") == "Issuing" and reason != "Failed":
                continue
            message = " ".join((condition.get("message") or "").split())[:300]
            why = f" ({reason})" if reason else ""
            facts.failing.append(f"{condition['type']} is False{why}{': ' + message if message else ''}")
    facts.hosts = rx.findall(r"(?m)^\s*-\s+([a-z0-9*][-a-z0-9.*]*\.[a-z]{2,})\s*$", text)
    useful = facts.not_after or facts.renewal or facts.attempts or facts.failing
    return facts if useful else None


def _span(delta: timedelta) -> str:
    days = int(abs(delta).total_seconds() // 86400)
    if days >= 1:
        return f"{days} day{'s' if days != 1 else ''}"
    hours = int(abs(delta).total_seconds() // 3600)
    return f"{hours} hour{'s' if hours != 1 else ''}"


# How the question is put: "is it still valid / ok?" (yes = not expired), "is it about to expire / has it
# expired?" (yes = expired or soon), "when does it expire?" (no yes or no: the date).
_ASKS_VALID = rx.compile(r"\b(?:valid|good|ok|okay|fine|healthy|working)\b")
_ASKS_WHEN = rx.compile(r"\b(?:when|how long|how many days|what date|until when)\b")
EXPIRED, SOON_, LATER = "expired", "soon", "later"


def _prefix(question: str, state: str, *, bounded: bool = False) -> str:
    if _ASKS_WHEN.search(question) and not question.startswith(("is ", "has ", "will ", "does ", "are ")):
        return ""
    if _ASKS_VALID.search(question) and bounded:  # "is it valid for the next 30 days?": not if it expires
        return {EXPIRED: "No: ", SOON_: "No: ", LATER: "Yes: "}[state]
    if _ASKS_VALID.search(question):
        return {EXPIRED: "No: ", SOON_: "Yes, for now: ", LATER: "Yes: "}[state]
    return {EXPIRED: "Yes: ", SOON_: "Yes: ", LATER: "No: "}[state]


def _dedupe(certs: list[CertFacts]) -> list[CertFacts]:
    """One entry per certificate (its YAML and its describe say the same), the one with an expiry first."""
    merged: dict[str, CertFacts] = {}
    for cert in sorted(certs, key=lambda c: c.not_after is None):
        kept = merged.setdefault(cert.label, cert)
        if kept is not cert:
            kept.failing = list(dict.fromkeys([*kept.failing, *cert.failing]))
            kept.attempts = max(kept.attempts, cert.attempts)
            kept.renewal = kept.renewal or cert.renewal
    return list(merged.values())


def verdict(
    state: AnalysisState, names: list[str], now: datetime, bound: TimeWindow | None = None
) -> tuple[str, list[str]]:
    """(the answer's first line, the lines after it) about the certificates the reads describe; ``bound``:
    the bound ahead the question puts on the expiry ("within 2 weeks"), else ``SOON`` or a due renewal."""
    reads = [out for out in state.outputs if out.ok and not out.no_data]
    certs = _dedupe(
        [f for out in reads if (f := facts_of(out)) is not None]
        + [
            CertFacts(h.label, not_after=h.not_after, hosts=list(h.hosts))
            for o in reads
            for h in held_in(o.text)
            # A metric lists every certificate: only those asked about (by name or host) answer.
            if not names or any(n in h.label or n in h.hosts for n in names)
        ]
    )
    if not certs:
        asked = ", ".join(names[:3]) or "the certificate asked about"
        return (
            f"No data: no read showed when the certificate for {asked} expires (no certificate's notAfter, "
            "no openssl output), so I cannot tell whether it is about to expire.",
            [],
        )
    question = " ".join((state.alert.text or "").lower().split())
    # The certificates the question names first (a read may describe others too).
    certs.sort(key=lambda c: not any(n in c.label or n in c.hosts for n in names))
    lines: list[str] = []
    for cert in certs[:3]:
        failing = cert.failing or ([f"{cert.attempts} failed issuance attempts"] if cert.attempts else [])
        renewal = ""
        if failing:
            tries = f"; {cert.attempts} failed issuance attempts" if cert.attempts and cert.failing else ""
            last = f", the last at {cert.last_failure}" if cert.last_failure and tries else ""
            renewal = f", and its renewal is failing: {'; '.join(failing)}{tries}{last}"
        if cert.not_after is None:
            lines.append(f"The certificate {cert.label}: no expiry was read{renewal}.")
            continue
        left = cert.not_after - now
        day, at = cert.not_after.strftime("%Y-%m-%d"), cert.not_after.strftime("%H:%M UTC")
        due = cert.renewal is not None and cert.renewal <= now
        if left.total_seconds() <= 0:
            line = (
                f"{_prefix(question, EXPIRED, bounded=bound is not None)}it has expired: the certificate "
                f"{cert.label} expired on {day} "
            )
            line += f"({at}), {_span(left)} ago{renewal}."
        else:
            until = bound.end if bound is not None else None
            if until is not None:
                state_ = SOON_ if cert.not_after <= until else LATER
            else:
                state_ = SOON_ if left <= SOON or due else LATER
            line = f"{_prefix(question, state_, bounded=until is not None)}the certificate {cert.label} "
            line += f"expires on {day} ({at}), in {_span(left)}"
            if until is not None and bound is not None:
                side = "inside" if state_ == SOON_ else "outside"
                line += f", {side} the bound asked ({bound.phrase}: by {until:%Y-%m-%d %H:%M UTC})"
            line += f"{renewal}."
            if due and cert.renewal is not None:
                line += f" Its renewal was due at {cert.renewal.strftime('%Y-%m-%dT%H:%M:%SZ')}."
            elif cert.renewal is not None:
                line += f" Its renewal is due on {cert.renewal.strftime('%Y-%m-%d')}."
        if cert.hosts:
            line += f" It covers {', '.join(dict.fromkeys(cert.hosts[:4]))}."
        lines.append(line[:1].upper() + line[1:])
    lines.append(f"(Compared with {now.strftime('%Y-%m-%dT%H:%M:%SZ')}, when the question was asked.)")
    return lines[0], lines[1:]
