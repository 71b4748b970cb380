"""Time is part of evidence: when each finding was true, and which findings are history.

A finding read from a log (or any output with timestamped lines) was true when the lines it rests on
were written: ``stamp`` finds the lines that carry its evidence and takes the latest of their times. A
finding about what a read shows now (a process state, a health check, a metric sample without a time,
what a correlator drew from several reads) was true when it was read. A log finding whose lines carry
no time is left unstamped: unknown, and so not history either.

An ``EvidenceWindow`` says from when evidence counts: the start of the incident's window, or the last
fix executed in the environment when that is later (what it fixed is not the cause of what is wrong
after it). A finding stamped before it is *history*: kept in the report under its own heading, never
a root cause and never the reason for a proposed fix.

A failure can also be over inside the window: ``settle`` marks as history a log failure whose lines
stopped, and that later evidence shows not recurring: the address it failed against announces it
listens again after its last line, or its lines all stopped before the latest recorded change and the
same log goes on past that change without them (for longer than the failure used to recur). A
failure still going on has lines after both, and stays current.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from diagnostics import conf
from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, ToolOutput, normalize
from diagnostics.agent.evidence.supersession import event_moment, supersede
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.timewindow import EvidenceWindow, iso, line_time

_SPACE = rx.compile(r"\s+")
# A log line's own time at its start: no part of what the line says (the same failure recurs later).
_LEADING_TIME = rx.compile(
    r"^\W*\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s?(?:Z|UTC|[+-]\d{2}:?\d{2})?\W*"
)
_CUT = ("…", "...")
_QUOTED = rx.compile(r"'([^'\n]{12,200})'")


def parse_iso(value: str) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _fold(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def _needles(finding: Finding) -> list[str]:
    """Pieces of text the lines under ``finding`` contain: its evidence, and text it quotes."""
    out: list[str] = []
    candidates = [finding.evidence, *(m.group(1) for m in _QUOTED.finditer(finding.summary))]
    for raw in candidates:
        text = raw.strip()
        for cut in _CUT:
            text = text.removesuffix(cut).strip()
        text = _LEADING_TIME.sub("", text)
        folded = _fold(text)[:80]
        if len(folded) >= 8 and folded not in out:
            out.append(folded)
    return out


# host:port as a log names it (also inside a URL); a stack frame's "File.java:696" has a letter after
# the dot and no port a listener would use, and is told apart by the failure word a line must carry.
_ADDRESS = rx.compile(
    r"(?:^|[^\w.-])([a-zA-Z][\w-]*(?:\.[\w-]+)*|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]*\]):(\d{2,5})\b"
)
_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
_ANY_HOST = "*"  # a listener bound to every address (0.0.0.0, [::], "port N" alone)


def _address_set(text: str) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for host, port in _ADDRESS.findall(text):
        host = host.lower()
        if host in ("0.0.0.0", "[::]", "[]"):
            host = _ANY_HOST
        found.add(("127.0.0.1" if host in _LOOPBACK else host, port))
    return found


_RECOVERED = rx.compile(
    r"\b(?:re-?connected|connected to|connection (?:re-?established|restored|recovered)|recovered|"
    r"reconnect(?:ion)? succeeded|back online|added connection|connection (?:added|opened|established))\b",
    rx.IGNORECASE,
)
_FAILING = rx.compile(r"\b(?:ERROR|FATAL|CRITICAL|PANIC|fail\w*|refused|denied|timed? ?out)\b", rx.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class _Carrier:
    """Which lines carry a finding: its evidence's text, or a failure naming an address it names (the
    same failure against the same dependency, on another request or another path)."""

    needles: list[str]
    addresses: set[tuple[str, str]]

    @classmethod
    def of(cls, finding: Finding) -> _Carrier:
        return cls(_needles(finding), _address_set(f"{finding.evidence}\n{finding.summary}"))

    def __bool__(self) -> bool:
        return bool(self.needles or self.addresses)

    def carries(self, line: str) -> bool:
        folded = _fold(line)
        if any(needle in folded for needle in self.needles):
            return True
        return (
            bool(self.addresses) and bool(_FAILING.search(line)) and bool(_address_set(line) & self.addresses)
        )


def evidence_time(text: str, finding: Finding) -> tuple[bool, datetime | None]:
    """Whether lines of ``text`` carry ``finding``'s evidence, and the latest time among them."""
    carrier = _Carrier.of(finding)
    matched = False
    latest: datetime | None = None
    for line in text.splitlines() if carrier else ():
        if not carrier.carries(line):
            continue
        matched = True
        moment = line_time(line)
        if moment is not None and (latest is None or moment > latest):
            latest = moment
    return matched, latest


def began_in(outputs: Sequence[ToolOutput]) -> Callable[[Finding], datetime | None]:
    """When a log finding began: the earliest timed line, in any log of ``outputs``, that carries it. None
    when no timed log line carries it (a state read now, what a correlator drew): when is unknown."""
    logs = [normalize(out.text).splitlines() for out in outputs if out.is_log]

    def began(finding: Finding) -> datetime | None:
        carrier = _Carrier.of(finding)
        times = [
            moment
            for lines in (logs if carrier else [])
            for line in lines
            if carrier.carries(line) and (moment := line_time(line)) is not None
        ]
        return min(times, default=None)

    return began


def recovered_after(text: str, finding: Finding) -> tuple[datetime, datetime, str] | None:
    """(last evidence line's time, recovery's time, the recovery line) when a log's lines under a problem
    ``finding`` stop and a later, timed line says the connection came back (and is itself no failure):
    what those lines say ended, whatever failed after it is another fault."""
    carrier = _Carrier.of(finding)
    if not carrier or not finding.is_problem:
        return None
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if carrier.carries(line)), default=-1)
    ended = line_time(lines[last]) if last >= 0 else None
    if ended is None:
        return None
    for line in lines[last + 1 :]:
        moment = line_time(line)
        if moment is not None and moment >= ended and _RECOVERED.search(line) and not _FAILING.search(line):
            return ended, moment, line.strip()
    return None


def _superseded(finding: Finding, ended: datetime, back: datetime, line: str) -> Finding:
    summary = (
        f"{finding.summary.rstrip('.')}. These failures ended at {iso(ended)} and the connection was "
        f"restored at {iso(back)} ('{clip_line(line)}'): history, not the current cause."
    )
    return dataclasses.replace(finding, summary=summary, history=True, at=iso(ended))


def clip_line(line: str, limit: int = 120) -> str:
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def stamp(
    out: ToolOutput, findings: list[Finding], read_at: datetime, *, aged_before: datetime | None = None
) -> list[Finding]:
    """``findings`` of ``out`` with ``at`` set: the time of the lines that carry them; else, when no line
    carries them (a state read now, a count, what a correlator drew from several reads), the read's time;
    a log line without a time leaves it empty (unknown). The alert's own text is never stamped.

    ``aged_before``: where no window of the incident's own is known (a replay, whose recordings are as old
    as their recording), the incident's window measured back from the read. An event's age ("2d") counts
    from the read, so an event last seen before it is history, whatever the recording's clock."""
    stamped: list[Finding] = []
    for finding in findings:
        if finding.at or out.tool == "alert":
            stamped.append(finding)
            continue
        if out.is_log and (recovered := recovered_after(out.text, finding)) is not None:
            stamped.append(_superseded(finding, *recovered))
            continue
        matched, moment = evidence_time(out.text, finding)
        aged = False
        if moment is None and not out.is_log:  # an event: when it was last seen; a state: when read
            seen = event_moment(out, finding, read_at)
            aged = seen is not None and aged_before is not None and seen < aged_before
            moment = seen or read_at
        elif moment is None and not matched:
            moment = read_at
        if moment is not None:
            finding = dataclasses.replace(finding, at=iso(moment), history=finding.history or aged)
        stamped.append(finding)
    return stamped


def timed_in_window(
    out: ToolOutput,
    findings: list[Finding],
    read_at: datetime,
    window: EvidenceWindow | None,
    state: AnalysisState,
) -> list[Finding]:
    """``findings`` of ``out`` stamped (``stamp``) and those before ``window`` marked history. Where the
    incident has no window of its own (a replay) and is about what is wrong now (an alert, a status
    question; a question's own window governs the rest), an event's age is compared against the incident's
    window measured back from ``read_at``."""
    aged = None
    if window is None and (state.intent is None or state.intent.kind == "status"):
        aged = read_at - timedelta(seconds=conf.get().agent.evidence_window_s)
    return mark_history(stamp(out, findings, read_at, aged_before=aged), window)


def mark_history(findings: list[Finding], window: EvidenceWindow | None) -> list[Finding]:
    """``findings`` with those true only before the window's start marked as history."""
    if window is None or window.since is None:
        return findings
    marked: list[Finding] = []
    for finding in findings:
        moment = parse_iso(finding.at)
        if moment is not None and moment < window.since and not finding.history:
            finding = dataclasses.replace(finding, history=True)
        marked.append(finding)
    return marked


def history_lines(findings: list[Finding], window: EvidenceWindow | None, limit: int = 5) -> list[str]:
    """The report's 'History' block: problems seen only before the window, with when they were seen."""
    old = [f for f in findings if f.history and f.severity >= 1]
    if not old:
        return []
    since = f" (before {iso(window.since)}: {window.reason})" if window and window.since else ""
    lines = [f"History{since}, not a cause of what is wrong now:"]
    seen: set[str] = set()
    for finding in old:
        if finding.summary in seen or len(seen) >= limit:
            continue
        seen.add(finding.summary)
        lines.append(f"- [{finding.at}] {finding.summary}")
    return lines


# --- failures that stopped inside the window ------------------------------------------------------

# A line that says a server listens (and on which address): the dependency a failure could not reach is up.
_LISTENING = rx.compile(
    r"\b(?:listening|listens|serving|bound to|accepting connections|server started|started server)\b",
    rx.IGNORECASE,
)
_PORT_ALONE = rx.compile(r"\bport:? ?(\d{2,5})\b", rx.IGNORECASE)
# A failure to reach an address (what a listener there coming up ends), not a failure of what it answered.
_UNREACHED = rx.compile(
    r"refused|unreachable|could not connect|couldn't connect|unable to connect|cannot connect|failed to "
    r"connect|connect(?:ion)? (?:failed|reset|timed out|error)|timed? ?out|no route to host|econn\w+|"
    r"etimedout|dial tcp",
    rx.IGNORECASE,
)

_Timed = list[tuple[datetime | None, str]]


@dataclasses.dataclass(frozen=True)
class _Listener:
    at: datetime
    addresses: set[tuple[str, str]]
    line: str

    def serves(self, addresses: set[tuple[str, str]]) -> bool:
        return any(
            (host, port) in self.addresses or (_ANY_HOST, port) in self.addresses
            for host, port in addresses
            if host != _ANY_HOST
        )


def _exact(moment: datetime) -> str:
    """``moment`` in UTC to the millisecond when it has one (a failure and its end can share a second)."""
    if not moment.microsecond:
        return iso(moment)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def change_times(state: AnalysisState) -> list[datetime]:
    """When each recorded change (``changes``' change log) was made."""
    times = (parse_iso(str(getattr(change, "at", ""))) for change in state.fact_dict("changes").values())
    return [moment for moment in times if moment is not None]


def _listeners(texts: list[str]) -> list[_Listener]:
    found = []
    for text in texts:
        for line in text.splitlines():
            if not _LISTENING.search(line) or _FAILING.search(line):
                continue
            moment = line_time(line)
            addresses = _address_set(line) | {(_ANY_HOST, port) for port in _PORT_ALONE.findall(line)}
            if moment is not None and addresses:
                found.append(_Listener(moment, addresses, line.strip()))
    return found


def _gap(lines: _Timed, carrier: _Carrier) -> timedelta:
    """The longest time between two lines carrying a failure: how long it went quiet while still going."""
    times = [moment for moment, line in lines if moment is not None and carrier.carries(line)]
    return max((b - a for a, b in itertools.pairwise(times)), default=timedelta(0))


def stopped(
    finding: Finding, logs: list[_Timed], listeners: list[_Listener], change: datetime | None
) -> tuple[datetime, str] | None:
    """(when its lines stopped, what shows they do not recur) for a log failure that is over: the address
    it could not reach listens after its last line (in another log), or its lines stopped before the latest
    change (``change``) and a log that carried them goes on past the change, for longer than the failure's
    own longest quiet spell, without them. None while it goes on, or when its lines carry no time."""
    carrier = _Carrier.of(finding)
    if not carrier or not finding.is_problem:
        return None
    ended: datetime | None = None
    holders: list[tuple[_Timed, int]] = []
    for lines in logs:
        last = max((i for i, (_, line) in enumerate(lines) if carrier.carries(line)), default=-1)
        if last < 0:
            continue
        moment = lines[last][0]
        if moment is None:
            return None  # when it stopped is unknown
        holders.append((lines, last))
        ended = moment if ended is None else max(ended, moment)
    if ended is None:
        return None
    if any(_UNREACHED.search(lines[last][1]) for lines, last in holders):
        # The failing log's own "listening on" is the client's own address, never its dependency's.
        own = {line.strip() for lines, _ in holders for _, line in lines}
        back = next(
            (li for li in listeners if li.at > ended and li.line not in own and li.serves(carrier.addresses)),
            None,
        )
        if back is not None:
            return (
                ended,
                f"what they could not reach listens since {_exact(back.at)} ('{clip_line(back.line)}')",
            )
    if change is None or ended >= change:
        return None
    for lines, last in holders:
        later = [moment for moment, _ in lines[last + 1 :] if moment is not None and moment >= change]
        if later and later[-1] - ended > _gap(lines, carrier):
            return ended, (
                f"they stopped before the latest recorded change ({iso(change)}), and the same log goes on "
                f"to {iso(later[-1])} without them"
            )
    return None


def settle(
    findings: list[Finding], outputs: Sequence[ToolOutput], changes: Sequence[datetime] = ()
) -> list[Finding]:
    """``findings`` with the log failures that are over (``stopped``) marked as history, with when they
    stopped and why they count as over; a failure that goes on stays current. What was read stays as read
    (a new list): a later read can show the failure back."""
    findings = supersede(findings, outputs)
    if not any(f.is_problem and f.at for f in findings):
        return findings
    texts = [normalize(out.text) for out in outputs]
    logs = [
        [(line_time(line), line) for line in text.splitlines()]
        for out, text in zip(outputs, texts, strict=True)
        if out.is_log
    ]
    listeners = _listeners(texts)
    change = max(changes, default=None)
    settled = []
    for finding in findings:
        over = stopped(finding, logs, listeners, change) if finding.is_problem and finding.at else None
        if over is not None:
            ended, why = over
            summary = (
                f"{finding.summary.rstrip('.')}. These failures stopped at {_exact(ended)}: {why}; not seen "
                "since: history, not the current cause."
            )
            finding = dataclasses.replace(finding, summary=summary, history=True, at=iso(ended))
        settled.append(finding)
    return settled
