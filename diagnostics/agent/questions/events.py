"""The answer to "list (or count) the events" (issue 39): the events the reads returned, as events.

Events come from every output that holds them: ``kubectl get events`` tables (type, reason, object,
message) and the ``Events:`` section of a describe (the object is the one described). A question naming
objects keeps their events; one that says "warning" keeps the warnings. Events read from nothing are no
data, never "no events".
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.analyzers.base import parse_events
from diagnostics.agent.evidence.inventory import Resolution
from diagnostics.agent.questions.answers import NUMBER, TABLE, Answer, confidence_of
from diagnostics.agent.request.intent import COUNT, Intent

COLUMNS = ["TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"]


def events_answer(intent: Intent, state: AnalysisState, known: list[Resolution], namespace: str) -> Answer:
    names = {m.name for r in known for m in r.matches} | {r.name for r in known}
    warnings_only = bool(rx.search(r"\bwarn(?:ing)?s?\b", state.alert.text.lower()))
    rows: list[list[str]] = []
    reads = 0
    for out in state.outputs:
        if out.tool == "alert" or not out.ok or out.no_data:
            continue
        events = parse_events(out.text)
        if not events and "event" not in out.tool.lower() and out.params.get("kind") != "event":
            continue
        reads += 1
        described = str(
            out.params.get("name") or out.params.get("resource_name") or out.params.get("pod_name") or ""
        )
        for event in events:
            obj = event.obj or described
            if names and not any(n in obj for n in names) and described not in names:
                continue
            if warnings_only and event.type != "Warning":
                continue
            row = [event.type, event.reason, obj, str(event.count), event.message]
            if row not in rows:
                rows.append(row)
    where = f" in namespace {namespace}" if namespace else ""
    if names:
        where += f" of {', '.join(sorted(names)[:4])}"
    what = f"{'warning ' if warnings_only else ''}events{where}"
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
        confidence=confidence_of(reads=reads, empty=0),
    )
