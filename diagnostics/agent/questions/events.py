"""The answer to "list (or count) the events" (issue 39): the events the reads returned, as events.

Events come from every output that holds them: ``kubectl get events`` tables (type, reason, object,
message) and the ``Events:`` section of a describe (the object is the one described). A question naming
objects keeps their events; one that says "warning" keeps the warnings. Events read from nothing are no
data, never "no events".
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.analyzers.base import Event, parse_events
from diagnostics.agent.evidence.inventory import Resolution
from diagnostics.agent.questions.answers import NUMBER, TABLE, Answer, confidence_of
from diagnostics.agent.questions.workload_facts import age_seconds
from diagnostics.agent.request.intent import COUNT, Intent

COLUMNS = ["TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"]


def events_answer(intent: Intent, state: AnalysisState, known: list[Resolution], namespace: str) -> Answer:
    names = {m.name for r in known for m in r.matches} | {r.name for r in known}
    warnings_only = bool(rx.search(r"\bwarn(?:ing)?s?\b", state.alert.text.lower()))
    rows: list[list[str]] = []
    reads = 0
    question = " ".join(state.alert.text.lower().split())
    # "the FailedScheduling events": a reason the reads hold, named in the question, keeps its events only.
    reasons = {
        e.reason for out in state.outputs if out.ok and not out.no_data for e in parse_events(out.text)
    }
    named = {r for r in reasons if len(r) > 3 and rx.search(rf"\b{rx.escape(r.lower())}\b", question)}
    window = intent.window
    span = (window.end - window.start).total_seconds() if window and window.start and window.end else None
    older = 0
    for out in state.outputs:
        if out.tool == "alert" or not out.ok or out.no_data:
            continue
        events = aged_events(out.text)
        if not events and "event" not in out.tool.lower() and out.params.get("kind") != "event":
            continue
        reads += 1
        described = str(
            out.params.get("name") or out.params.get("resource_name") or out.params.get("pod_name") or ""
        )
        mine: list[list[str]] = []  # one read's rows: two alike are two events; alike across reads, one
        for event, age in events:
            obj = event.obj or described
            if names and not any(n in obj for n in names) and described not in names:
                continue
            if (warnings_only and event.type != "Warning") or (named and event.reason not in named):
                continue
            if span is not None and age is not None and age > span:
                older += 1  # seen last before the question's window
                continue
            row = [event.type, event.reason, obj, str(event.count), event.message]
            if row not in rows:
                mine.append(row)
        rows += mine
    where = f" in namespace {namespace}" if namespace else ""
    if names:
        where += f" of {', '.join(sorted(names)[:4])}"
    if span is not None and window is not None:
        where += f" {window.phrase.rstrip('?.!')}"
    what = (
        f"{'warning ' if warnings_only else ''}{' '.join(sorted(named)) + ' ' if named else ''}events{where}"
    )
    if not reads:
        return Answer(
            intent=intent.kind,
            shape=NUMBER if intent.kind == COUNT else TABLE,
            headline=f"No data: no read of {what} returned anything, so I cannot list them (this is not the "
            "same as none).",
            counted=what,
            no_data=True,
            confidence="low",
            notes=[f"no events read for {what}."],
        )
    warnings = sum(1 for r in rows if r[0] == "Warning")
    notes = [f"{older} older events (last seen before the window) are left out."] if older else []
    if intent.kind == COUNT:
        headline = f"{len(rows)} {what} ({warnings} warnings)."
    elif rows:
        shown = "; ".join(f"{r[0]} {r[1]} on {r[2]}: {r[4][:80]}" for r in rows[:8])
        headline = f"{len(rows)} {what} ({warnings} warnings): {shown}."
    else:
        headline = f"No {what}: the reads returned none."
    return Answer(
        intent=intent.kind,
        shape=NUMBER if intent.kind == COUNT else TABLE,
        headline=headline,
        value=len(rows),
        counted=what,
        columns=COLUMNS,
        rows=rows,
        notes=notes,
        confidence=confidence_of(reads=reads, empty=0),
    )


# The age kubectl prints beside an event: a table's LAST SEEN (first column), a describe's Age (after the
# reason).
_TABLE_AGE = rx.compile(r"^\s*(\S+)\s+(?:Normal|Warning)\s")
_DESCRIBE_AGE = rx.compile(r"^\s*(?:Normal|Warning)\s+\w+\s+(\S+)")


def aged_events(text: str) -> list[tuple[Event, int | None]]:
    """Each event of ``text`` with how long ago it was last seen (seconds; None when not printed)."""
    found: list[tuple[Event, int | None]] = []
    for line in text.splitlines():
        for event in parse_events(line):
            match = _TABLE_AGE.match(line) or _DESCRIBE_AGE.match(line)
            found.append((event, age_seconds(match.group(1)) if match else None))
    return found
