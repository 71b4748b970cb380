"""Which certificates expire within a bound ("which certificates expire in the next 30 days?", "any TLS certs
expiring within 2 weeks", "certs that expire before 2027-01-15"): the bound is read from the question
(``timewindow.horizon``: hours, days, weeks, months, years, "this month", "before <date>") and anchored on
when the question was asked; every certificate any source shows (``cert_inventory``: cert-manager
Certificates, TLS Secrets, the Secrets Ingresses serve, the expiry metrics; each once) is compared with it by
the expiry its reads print. The answer lists those within the bound with their dates, says so outright when
none is, names each certificate whose expiry no read showed, and says which sources were read and which
could not be: unknown is never "none".
"""

from __future__ import annotations

from datetime import datetime, timedelta

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.questions import certificates
from diagnostics.agent.questions.cert_inventory import (
    ABSENT,
    EMPTY,
    READ,
    Entry,
    inventory,
    unknown_sources,
)
from diagnostics.agent.request.timewindow import TimeWindow, horizon

# Certificates asked about as a set: "which/what/any/all/list/how many ... certificates", "are there certs",
# or a question that starts with them ("certs expiring this week?"); and asked about their expiry.
_WHICH = rx.compile(
    r"\b(?:which|what|any|all|every|each|list|show|find|count|how many|have|there)\b(?:\s+[\w.-]+){0,3}?\s+"
    r"(?:certificates?|certs?)\b|^\s*(?:(?:tls|ssl|x\.?509|https)\s+)?(?:certificates|certs)\b"
)
_EXPIRY_WORDS = rx.compile(r"\b(?:expir\w*|renew\w*|lapse\w*|run(?:s|ning)? out|valid\w*|due)\b")


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


def _days(delta: timedelta) -> str:
    seconds = abs(delta.total_seconds())
    if seconds >= 86400:
        days = int(seconds // 86400)
        return f"{days} day{'s' if days != 1 else ''}"
    hours = int(seconds // 3600)
    return f"{hours} hour{'s' if hours != 1 else ''}"


def _line(entry: Entry, now: datetime) -> str:
    cert = entry.facts
    assert cert.not_after is not None
    left = cert.not_after - now
    when = f"{cert.not_after:%Y-%m-%d} ({cert.not_after:%H:%M UTC})"
    line = f"{entry.label} expires on {when}, in {_days(left)}"
    if left.total_seconds() <= 0:
        line = f"{entry.label} expired on {when}, {_days(left)} ago"
    failing = cert.failing or ([f"{cert.attempts} failed issuance attempts"] if cert.attempts else [])
    if failing:
        line += f"; its renewal is failing: {'; '.join(failing)}"
    if entry.served:
        line += f"; {'; '.join(entry.served[:2])}"
    return line


def _unknown(entry: Entry) -> str:
    served = f", which {entry.served[0].replace(' serves it', ' serves')}" if entry.served else ""
    return f"{entry.label}{served}: {entry.problem}" if entry.problem else f"{entry.label}{served}"


def listed_verdict(state: AnalysisState, now: datetime, namespace: str = "") -> tuple[str, list[str]]:
    """(the answer, the lines under it) to which certificates expire within the question's bound (30 days,
    the common alerting threshold, when it names none), from every source read (``cert_inventory``)."""
    bound = expiry_bound(state.alert.text or "", now)
    until = bound.end if bound is not None and bound.end is not None else now + certificates.SOON
    said = bound.phrase if bound is not None else "in the next 30 days"
    within = f"{said} (by {until:%Y-%m-%d %H:%M UTC})"
    where = f" in namespace {namespace}" if namespace else ""
    entries, sources = inventory(state, namespace)
    compared = f"(Compared with {now:%Y-%m-%dT%H:%M:%SZ}, when the question was asked.)"
    if bound is None:
        compared += " No bound was asked: 30 days, the usual threshold of an expiry alert."
    unread = unknown_sources(sources)
    shown = "Sources: " + "; ".join(s.said for s in sources) + "."
    if not entries:
        answered = [s.said for s in sources if s.state in (READ, EMPTY, ABSENT)]
        if not answered:
            return (
                f"No data: no read listed the certificates{where} ({unread}), so I cannot tell which "
                f"expire {said}.",
                [],
            )
        first = f"No certificate expires {within} that the cluster shows{where}: {'; '.join(answered)}."
        return (f"{first} {unread[:1].upper()}{unread[1:]}." if unread else first), [compared]
    expired, soon, later, unknown = [], [], [], []
    for entry in entries:
        if entry.facts.not_after is None:
            unknown.append(entry)
        elif entry.facts.not_after <= now:
            expired.append(entry)
        elif entry.facts.not_after <= until:
            soon.append(entry)
        else:
            later.append(entry)
    for group in (expired, soon, later):
        group.sort(key=lambda e: e.facts.not_after or now)
    known = len(entries) - len(unknown)
    lines: list[str] = []
    if soon:
        count = f"{len(soon)} of the {len(entries)} certificates{where}"
        first = (
            f"{count} expire{'s' if len(soon) == 1 else ''} {within}: "
            + "; ".join(_line(e, now) for e in soon[:5])
            + "."
        )
        lines += [_line(e, now) + "." for e in soon[5:]]
    elif known:
        first = f"No certificate{where} whose expiry was read ({known} of {len(entries)}) expires {within}"
        if later:
            first += f"; the soonest, {_line(later[0], now)}"
        first += "."
        if unread:
            first += f" Not read: {unread}."
    else:
        first = (
            f"No data: none of the {len(entries)} certificates{where} that were listed had its expiry read, "
            f"so I cannot tell which expire {said}."
        )
    if expired:  # said in the answer itself: an expired certificate is past any bound ahead
        first += " Already expired: " + "; ".join(_line(e, now) for e in expired) + "."
    if later and soon:
        lines.append(
            "Later: "
            + "; ".join(f"{e.label} on {e.facts.not_after:%Y-%m-%d}" for e in later[:8] if e.facts.not_after)
            + "."
        )
    if unknown:
        lines.append(
            f"Unknown: no read showed when {len(unknown)} certificate{'s' if len(unknown) != 1 else ''} "
            f"expire{'s' if len(unknown) == 1 else ''} ({'; '.join(_unknown(e) for e in unknown[:8])}"
            f"{'; ...' if len(unknown) > 8 else ''}); {'it' if len(unknown) == 1 else 'they'} may expire "
            f"{said}."
        )
    lines += [shown, compared]
    return first, lines
