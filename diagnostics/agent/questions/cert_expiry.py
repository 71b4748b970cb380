"""Which certificates expire within a bound ("which certificates expire in the next 30 days?", "any TLS certs
expiring within 2 weeks", "certs that expire before 2027-01-15"): the bound is read from the question
(``timewindow.horizon``: hours, days, weeks, months, years, "this month", "before <date>") and anchored on
when the question was asked; every certificate a listing returned is compared with it by the expiry its own
reads print (``certificates.facts_of``, or a listing column that names one). The answer lists those within
the bound with their dates, says so outright when none is, and names each certificate whose expiry no read
showed: unknown is never "none".
"""

from __future__ import annotations

from datetime import datetime, timedelta

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.questions import certificates
from diagnostics.agent.questions.asked import parse_tables
from diagnostics.agent.questions.certificates import CERT_KINDS, CertFacts, facts_of, parse_moment
from diagnostics.agent.request.timewindow import TimeWindow, horizon

# Certificates asked about as a set: "which/what/any/all/list/how many ... certificates", "are there certs",
# or a question that starts with them ("certs expiring this week?"); and asked about their expiry.
_WHICH = rx.compile(
    r"\b(?:which|what|any|all|every|each|list|show|find|count|how many|have|there)\b(?:\s+[\w.-]+){0,3}?\s+"
    r"(?:certificates?|certs?)\b|^\s*(?:(?:tls|ssl|x\.?509|https)\s+)?(?:certificates|certs)\b"
)
_EXPIRY_WORDS = rx.compile(r"\b(?:expir\w*|renew\w*|lapse\w*|run(?:s|ning)? out|valid\w*|due)\b")
_EXPIRY_COLUMN = rx.compile(r"NOT.?AFTER|EXPIR|VALID.?(?:UNTIL|TO)|ENDDATE")
_NONE_FOUND = rx.compile(r"(?i)\bno resources found\b")
# How many certificates of a listing have their expiry read, one read each (the rest are named unread).
READ_BUDGET = 15


def asks_which(question: str) -> bool:
    """Whether ``question`` asks which certificates expire (a set, not one certificate it names)."""
    lowered = " ".join(question.lower().split())
    return bool(
        certificates.ASKS.search(lowered)
        and _WHICH.search(lowered)
        and _EXPIRY_WORDS.search(lowered)
        and not rx.search(r"\bwhy\b", lowered)
    )


def expiry_bound(question: str, now: datetime) -> TimeWindow | None:
    """The bound ahead of ``now`` the question puts on an expiry; None when it names none."""
    return horizon(" ".join(question.split()), now)


def listings(state: AnalysisState) -> list[tuple[bool, bool]]:
    """(ok, empty) of each listing or search of certificates that was made; empty: it said it found none
    (kubectl's "No resources found"), not that it could not list."""
    return [
        (out.ok, out.no_data or bool(_NONE_FOUND.search(out.text[:500])))
        for out in state.outputs
        if str(out.params.get("kind") or "").lower() in CERT_KINDS and not out.params.get("name")
    ]


def expiries(state: AnalysisState) -> dict[tuple[str, str], CertFacts]:
    """The facts read of each certificate, by (namespace, name): its own reads (YAML, describe), else a
    listing's column that prints its expiry."""
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
            continue
        for row in parse_tables(out.text, out.tool, str(out.params.get("namespace") or "")):
            key = (row.values.get("NAMESPACE") or row.namespace, row.name)
            for column, value in row.values.items():
                if _EXPIRY_COLUMN.search(column.upper()) and (moment := parse_moment(value)) is not None:
                    label = f"{row.name}{f' (namespace {key[0]})' if key[0] else ''}"
                    facts.setdefault(key, CertFacts(label, not_after=moment))
    return facts


def _label(key: tuple[str, str]) -> str:
    return f"{key[1]} (namespace {key[0]})" if key[0] else key[1]


def _days(delta: timedelta) -> str:
    seconds = abs(delta.total_seconds())
    if seconds >= 86400:
        days = int(seconds // 86400)
        return f"{days} day{'s' if days != 1 else ''}"
    hours = int(seconds // 3600)
    return f"{hours} hour{'s' if hours != 1 else ''}"


def _line(key: tuple[str, str], cert: CertFacts, now: datetime) -> str:
    assert cert.not_after is not None
    left = cert.not_after - now
    when = f"{cert.not_after:%Y-%m-%d} ({cert.not_after:%H:%M UTC})"
    line = f"{_label(key)} expires on {when}, in {_days(left)}"
    if left.total_seconds() <= 0:
        line = f"{_label(key)} expired on {when}, {_days(left)} ago"
    failing = cert.failing or ([f"{cert.attempts} failed issuance attempts"] if cert.attempts else [])
    if failing:
        line += f"; its renewal is failing: {'; '.join(failing)}"
    return line


def listed_verdict(state: AnalysisState, now: datetime, namespace: str = "") -> tuple[str, list[str]]:
    """(the answer, the lines under it) to which certificates expire within the question's bound (30 days,
    the common alerting threshold, when it names none)."""
    bound = expiry_bound(state.alert.text or "", now)
    until = bound.end if bound is not None and bound.end is not None else now + certificates.SOON
    said = bound.phrase if bound is not None else "in the next 30 days"
    within = f"{said} (by {until:%Y-%m-%d %H:%M UTC})"
    where = f" in namespace {namespace}" if namespace else ""
    read = expiries(state)
    keys = [
        k for k in dict.fromkeys([*certificates.found(state), *read]) if not namespace or k[0] == namespace
    ]
    compared = f"(Compared with {now:%Y-%m-%dT%H:%M:%SZ}, when the question was asked.)"
    if bound is None:
        compared += " No bound was asked: 30 days, the usual threshold of an expiry alert."
    if not keys:
        made = listings(state)
        if any(ok and empty for ok, empty in made):
            return (
                f"No certificate expires {within} that the cluster lists: the listing of cert-manager "
                f"Certificates{where} returned none. Certificates kept only in Secrets or served by an "
                "ingress were not read, so they are unknown.",
                [compared],
            )
        return (
            f"No data: no read listed the certificates{where} (no Certificate listing returned), so I cannot "
            f"tell which expire {said}.",
            [],
        )
    expired, soon, later, unknown = [], [], [], []
    for key in keys:
        cert = read.get(key)
        if cert is None or cert.not_after is None:
            unknown.append(key)
        elif cert.not_after <= now:
            expired.append((key, cert))
        elif cert.not_after <= until:
            soon.append((key, cert))
        else:
            later.append((key, cert))
    for group in (expired, soon, later):
        group.sort(key=lambda item: item[1].not_after or now)
    known = len(keys) - len(unknown)
    lines: list[str] = []
    if soon:
        count = f"{len(soon)} of the {len(keys)} certificates{where}"
        first = (
            f"{count} expire{'s' if len(soon) == 1 else ''} {within}: "
            + "; ".join(_line(k, c, now) for k, c in soon[:5])
            + "."
        )
        lines += [_line(k, c, now) + "." for k, c in soon[5:]]
    elif known:
        first = f"No certificate{where} whose expiry was read ({known} of {len(keys)}) expires {within}"
        if later:
            first += f"; the soonest, {_line(*later[0], now)}"
        first += "."
    else:
        first = (
            f"No data: none of the {len(keys)} certificates{where} that were listed had its expiry read, "
            f"so I cannot tell which expire {said}."
        )
    if expired:  # said in the answer itself: an expired certificate is past any bound ahead
        first += " Already expired: " + "; ".join(_line(k, c, now) for k, c in expired) + "."
    if later and soon:
        lines.append(
            "Later: " + "; ".join(f"{_label(k)} on {c.not_after:%Y-%m-%d}" for k, c in later[:8]) + "."
        )
    if unknown:
        lines.append(
            f"Unknown: no read showed when {len(unknown)} certificate{'s' if len(unknown) != 1 else ''} "
            f"expire{'s' if len(unknown) == 1 else ''} ({', '.join(_label(k) for k in unknown[:8])}"
            f"{', ...' if len(unknown) > 8 else ''}); {'it' if len(unknown) == 1 else 'they'} may expire "
            f"{said}."
        )
    lines.append(compared)
    return first, lines
