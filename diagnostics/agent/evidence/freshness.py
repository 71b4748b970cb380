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
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import ToolOutput
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.timewindow import EvidenceWindow, iso, line_time

_SPACE = rx.compile(r"\s+")
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
        folded = _fold(text)[:80]
        if len(folded) >= 8 and folded not in out:
            out.append(folded)
    return out


def evidence_time(text: str, finding: Finding) -> tuple[bool, datetime | None]:
    """Whether lines of ``text`` carry ``finding``'s evidence, and the latest time among them."""
    needles = _needles(finding)
    matched = False
    latest: datetime | None = None
    for line in text.splitlines() if needles else ():
        folded = _fold(line)
        if not any(needle in folded for needle in needles):
            continue
        matched = True
        moment = line_time(line)
        if moment is not None and (latest is None or moment > latest):
            latest = moment
    return matched, latest


_RECOVERED = rx.compile(
    r"\b(?:re-?connected|connected to|connection (?:re-?established|restored|recovered)|recovered|"
    r"reconnect(?:ion)? succeeded|back online)\b",
    rx.IGNORECASE,
)
_FAILING = rx.compile(r"\b(?:ERROR|FATAL|CRITICAL|PANIC|fail\w*|refused|denied|timed? ?out)\b", rx.IGNORECASE)


def recovered_after(text: str, finding: Finding) -> tuple[datetime, datetime, str] | None:
    """(last evidence line's time, recovery's time, the recovery line) when a log's lines under a problem
    ``finding`` stop and a later, timed line says the connection came back (and is itself no failure):
    what those lines say ended, whatever failed after it is another fault."""
    needles = _needles(finding)
    if not needles or not finding.is_problem:
        return None
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if any(n in _fold(line) for n in needles)), default=-1)
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


def stamp(out: ToolOutput, findings: list[Finding], read_at: datetime) -> list[Finding]:
    """``findings`` of ``out`` with ``at`` set: the time of the lines that carry them; else, when no line
    carries them (a state read now, a count, what a correlator drew from several reads), the read's time;
    a log line without a time leaves it empty (unknown). The alert's own text is never stamped."""
    stamped: list[Finding] = []
    for finding in findings:
        if finding.at or out.tool == "alert":
            stamped.append(finding)
            continue
        if out.is_log and (recovered := recovered_after(out.text, finding)) is not None:
            stamped.append(_superseded(finding, *recovered))
            continue
        matched, moment = evidence_time(out.text, finding)
        if moment is None and not (matched and out.is_log):
            moment = read_at
        stamped.append(dataclasses.replace(finding, at=iso(moment)) if moment is not None else finding)
    return stamped


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
