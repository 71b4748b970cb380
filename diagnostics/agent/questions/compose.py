"""The answer shape of each question intent, built from what the reads returned (no LLM).

Each builder reads the tool outputs of the diagnosis (``AnalysisState.outputs``) and the names resolved
against the inventory; each says what it counted, quoted or grouped, what it could not see, and never
calls anything healthy on empty reads.
"""

from __future__ import annotations

from collections.abc import Callable

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.evidence.analyzers.base import normalize, parse_events
from diagnostics.agent.evidence.inventory import Resolution, Row
from diagnostics.agent.evidence.logtemplates import (
    error_events,
    group_errors,
    is_error_line,
    is_warning_line,
    merge_groups,
)
from diagnostics.agent.findings import Finding
from diagnostics.agent.questions.answers import (
    ERROR_GROUPS,
    LOG_LINES,
    LOW,
    NUMBER,
    QUESTION,
    TABLE,
    Answer,
    confidence_of,
)
from diagnostics.agent.questions.asked import selected
from diagnostics.agent.questions.changes import changes_answer
from diagnostics.agent.questions.clarify import ask_back
from diagnostics.agent.questions.events import events_answer
from diagnostics.agent.questions.listed_states import listed_state
from diagnostics.agent.questions.reads import (
    has_data,
    in_window,
    leading_number,
    log_lines,
    resolved_pods,
    scope_phrase,
)
from diagnostics.agent.questions.restarts import restarts_answer
from diagnostics.agent.questions.timeline import timeline_answer
from diagnostics.agent.request.intent import CHANGES, COUNT, ERRORS, LIST, LOGS, SEARCH, Intent, specific_name
from diagnostics.agent.request.timewindow import line_time

STATE_TESTS: dict[str, Callable[[Row], bool]] = {
    "running": lambda r: r.status in ("Running", "Active", "Ready", "Bound") and _ready_full(r.ready),
    "failing": lambda r: (
        r.status not in ("Running", "Completed", "Succeeded", "Active", "Ready", "Bound", "")
        or not _ready_full(r.ready)
    ),
    "crashing": lambda r: (
        r.status in ("CrashLoopBackOff", "Error", "OOMKilled", "Init:CrashLoopBackOff", "Init:Error")
    ),
    "pending": lambda r: (
        r.status in ("Pending", "ContainerCreating", "PodInitializing") or r.status.startswith("Init:")
    ),
    "restarting": lambda r: leading_number(r.restarts) > 0,
    "completed": lambda r: r.status in ("Completed", "Succeeded", "Complete"),
    "evicted": lambda r: r.status == "Evicted",
}
_LOG_LINES_SHOWN = 30


def state_filter(state: str) -> Callable[[Row], bool] | None:
    """The test of a row for a state slot: a state word's, or exactly one kubectl STATUS ("status:Error";
    an init container's ``Init:Error`` included)."""
    if state.startswith("status:"):
        wanted = state.split(":", 1)[1].lower()
        return lambda r: r.status.lower() == wanted or r.status.lower().endswith(":" + wanted)
    return STATE_TESTS.get(state)


def _ready_full(ready: str) -> bool:
    match = rx.fullmatch(r"(\d+)/(\d+)", ready or "")
    return not match or match.group(1) == match.group(2)


def _logs(state: AnalysisState, pods: list[Row]) -> list[tuple[str, ToolOutput]]:
    """(pod, output) of every log read about ``pods`` (all log reads when no pod resolved)."""
    names = {p.name for p in pods}
    reads = []
    for out in state.outputs:
        pod = str(out.params.get("pod_name") or "")
        if out.is_log and pod and (not names or pod in names or pod == "*"):
            reads.append((pod, out))
    return reads


def _line(pod: str, line: str) -> dict[str, str]:
    moment = line_time(line)
    return {"source": pod, "time": moment.isoformat() if moment else "", "text": line.strip()[:600]}


def _unresolved_answer(intent: Intent, unknown: list[Resolution], state: AnalysisState) -> Answer:
    names = ", ".join(repr(r.name) for r in unknown)
    known = sorted({r.name for r in state.inventory.rows if r.kind != "namespace"})[:15]
    listed = f" The environment lists: {', '.join(known)}." if known else ""
    return Answer(
        intent=intent.kind,
        shape=QUESTION,
        headline=f"I could not find {names} in the environment's listings (pods, deployments, jobs, "
        f"namespaces).{listed} "
        "Which object do you mean (its exact name and namespace)?",
        no_data=not known,
        confidence=LOW,
        matched=[r.to_json() for r in unknown],
    )


def _in_namespace(known: list[Resolution], namespace: str) -> list[Resolution]:
    """The matches in the namespace the question names (all of them when none is there)."""
    if not namespace:
        return known
    narrowed = [Resolution(r.name, [m for m in r.matches if m.namespace in ("", namespace)]) for r in known]
    return [r for r in narrowed if r.known] or known


def build_question_answer(
    intent: Intent, state: AnalysisState, resolved: list[Resolution], namespace: str
) -> Answer:
    """The answer shape of ``intent`` from the reads of ``state``."""
    known = _in_namespace([r for r in resolved if r.known], namespace)
    needs_entity = intent.kind not in (COUNT, LIST) or intent.object_kind in ("restart", "error")
    if resolved and not known and not namespace and needs_entity:
        return _unresolved_answer(intent, resolved, state)
    named = [r for r in resolved if not r.known and specific_name(r.name)]
    if named and not known:
        # A name only an object can have, and nothing has it: say so, never answer about the namespace
        # or the cluster instead.
        return _unresolved_answer(intent, named, state)
    if (question := ask_back(intent, known, namespace)) is not None:
        return question
    if intent.kind in (COUNT, LIST):
        answer = _count_or_list(intent, state, known, namespace)
    elif intent.kind == SEARCH:
        answer = _search(intent, state, known, namespace)
    elif intent.kind == ERRORS:
        answer = _errors(intent, state, known, namespace)
    elif intent.kind == LOGS:
        answer = _logs_answer(intent, state, known, namespace)
    elif intent.kind == CHANGES:
        answer = changes_answer(intent, state, known, namespace)
    else:
        answer = timeline_answer(intent, state, known, namespace)
    answer.matched = [r.to_json() for r in resolved]
    answer.window = intent.window.to_json() if intent.window else None
    ambiguous = [r for r in known if r.ambiguous]
    if ambiguous:
        answer.notes.append(
            "; ".join(f"{r.name!r} matched {', '.join(m.label for m in r.matches[:6])}" for r in ambiguous)
            + " (all of them are included)."
        )
    unknown = [r.name for r in resolved if not r.known]
    if unknown and known:
        answer.notes.append(f"Nothing in the environment is named {', '.join(map(repr, unknown))}.")
    return answer


# -- count / list ------------------------------------------------------------------------------------


def _count_or_list(intent: Intent, state: AnalysisState, known: list[Resolution], namespace: str) -> Answer:
    if intent.object_kind == "restart":
        return restarts_answer(intent, state, known)
    if intent.object_kind == "error":
        answer = _errors(intent, state, known, namespace)
        answer.shape, answer.value, answer.counted = (
            NUMBER,
            sum(g["count"] for g in answer.groups),
            "error lines",
        )
        answer.headline = (
            f"{answer.value} error lines in the logs of "
            f"{scope_phrase(intent, known, namespace) or 'what was read'}. " + answer.headline
        )
        return answer
    if intent.object_kind == "event":
        return events_answer(intent, state, known, namespace)
    kind = intent.object_kind if intent.object_kind not in ("", "container") else "pod"
    rows = state.inventory.of_kind(kind, namespace if kind not in ("namespace", "node") else "")
    if known and kind not in ("namespace", "node"):
        names = {m.name for r in known for m in r.matches} | {r.name for r in known}
        rows = [r for r in rows if r.name in names or any(r.name.startswith(n + "-") for n in names)]
    listed = any(k == kind for k, _ in state.inventory.listed) or bool(rows)
    by_labels = selected(rows, intent.selector, state)
    if by_labels is not None:
        rows = by_labels
    state_test = state_filter(intent.state)
    label = intent.state.split(":", 1)[-1]
    if state_test is None and (named := listed_state(state, kind, state.alert.text or "")) is not None:
        state_test, label = named  # a state named by the listing's own values ("not bound", "suspended")
    counted_rows = [r for r in rows if state_test(r)] if state_test else rows
    what = f"{label + ' ' if label else ''}{kind}s"
    where = (
        f" in namespace {namespace}"
        if namespace
        else (" across the cluster" if kind not in ("namespace", "node") else "")
    )
    if known:
        where += f" named like {', '.join(r.name for r in known)}"
    if intent.selector:
        where += f" with labels {','.join(intent.selector)}" + (
            "" if by_labels is not None else " (no labels read)"
        )
    columns = ["NAME", "NAMESPACE", "STATUS", "READY", "RESTARTS", "AGE"]
    table = [[r.name, r.namespace, r.status, r.ready, r.restarts, r.age] for r in counted_rows]
    if not listed:
        return Answer(
            intent=intent.kind,
            shape=NUMBER if intent.kind == COUNT else TABLE,
            headline=f"No data: the listing of {kind}s{where} returned nothing, so I cannot count or list "
            "them "
            "(this is not the same as none).",
            counted=f"{what}{where}",
            no_data=True,
            confidence=LOW,
            notes=[f"no listing of {kind}s{where} returned data."],
        )
    by_status: dict[str, int] = {}
    for row in rows:
        by_status[row.status or "-"] = by_status.get(row.status or "-", 0) + 1
    breakdown = ", ".join(f"{status}: {n}" for status, n in sorted(by_status.items(), key=lambda kv: -kv[1]))
    if intent.kind == COUNT:
        headline = f"{len(counted_rows)} {what}{where}"
        if state_test and len(rows) != len(counted_rows):
            headline += f" (of {len(rows)} {kind}s listed)"
        headline += f". By status: {breakdown}." if breakdown and kind != "namespace" else "."
    else:
        shown = ", ".join(r.name for r in counted_rows[:20])
        headline = f"{len(counted_rows)} {what}{where}: {shown}." if counted_rows else f"No {what}{where}."
        if breakdown and kind != "namespace":
            headline += f" By status: {breakdown}."
    return Answer(
        intent=intent.kind,
        shape=NUMBER if intent.kind == COUNT else TABLE,
        headline=headline,
        value=len(counted_rows),
        counted=f"{what}{where}",
        columns=columns,
        rows=table,
        confidence=confidence_of(reads=1, empty=0),
    )


# -- logs ----------------------------------------------------------------------------------------------


def _read_logs(
    intent: Intent, state: AnalysisState, known: list[Resolution]
) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(pod, its lines in the window) of every log read with data, and notes for the empty ones."""
    reads, notes = [], []
    for pod, out in _logs(state, resolved_pods(known, state)):
        kind = "previous logs" if "previous" in out.tool.lower() else "logs"
        if not has_data(out):
            phrase = f" ({intent.window.phrase.rstrip('?.!')})" if intent.window else ""
            notes.append(f"no {kind} of pod {pod}{phrase}.")
            continue
        lines = [line for line in log_lines(out.text) if in_window(line, intent)]
        if not lines:
            notes.append(
                f"the {kind} of pod {pod} hold no line in "
                f"{intent.window.label() if intent.window else 'them'}."
            )
            continue
        reads.append((pod if kind == "logs" else f"{pod} (previous)", lines))
    return reads, notes


def _empty_logs_answer(
    intent: Intent, known: list[Resolution], namespace: str, notes: list[str], shape: str
) -> Answer:
    scope = scope_phrase(intent, known, namespace) or "the object asked about"
    return Answer(
        intent=intent.kind,
        shape=shape,
        headline=f"No data: no log lines of {scope} could be read, so I cannot say what they hold "
        "(an empty read is not a clean log).",
        notes=notes or ["no log read returned data."],
        no_data=True,
        confidence=LOW,
    )


def _logs_answer(intent: Intent, state: AnalysisState, known: list[Resolution], namespace: str) -> Answer:
    reads, notes = _read_logs(intent, state, known)
    if not reads:
        return _empty_logs_answer(intent, known, namespace, notes, LOG_LINES)
    selected: list[dict[str, str]] = []
    total = 0
    levels = intent.levels
    for pod, lines in reads:
        total += len(lines)
        if levels:
            lines = [
                ln
                for ln in lines
                if ("error" in levels and is_error_line(ln)) or ("warning" in levels and is_warning_line(ln))
            ]
        shown = lines[-(intent.limit or _LOG_LINES_SHOWN) :]
        selected += [_line(pod, line) for line in shown]
    groups = merge_groups(
        [g for pod, lines in reads for g in group_errors(error_events("\n".join(lines)), source=pod)]
    )
    errors = sum(g.count for g in groups)
    scope = scope_phrase(intent, known, namespace)
    headline = (
        f"Logs of {scope or ', '.join(p for p, _ in reads)}: {total} lines read from {len(reads)} log(s)"
    )
    headline += f"; {len(selected)} {'/'.join(sorted(levels)) + ' ' if levels else ''}lines quoted below."
    headline += (
        f" They hold {errors} error lines in {len(groups)} groups."
        if errors
        else " No error line among them."
    )
    details = []
    if intent.summarize or errors:
        for pod, lines in reads:
            first, last = line_time(lines[0]), line_time(lines[-1])
            span = f" from {first.isoformat()} to {last.isoformat()}" if first and last else ""
            details.append(f"- {pod}: {len(lines)} lines{span}; last line: {lines[-1].strip()[:300]}")
    return Answer(
        intent=intent.kind,
        shape=LOG_LINES,
        headline=headline,
        lines=selected,
        groups=[g.to_json() for g in groups[:10]],
        details=details,
        notes=notes,
        confidence=confidence_of(reads=len(reads) + len(notes), empty=len(notes)),
        sources=[p for p, _ in reads],
    )


def _search(intent: Intent, state: AnalysisState, known: list[Resolution], namespace: str) -> Answer:
    reads, notes = _read_logs(intent, state, known)
    term = intent.term
    if not reads:
        return _empty_logs_answer(intent, known, namespace, notes, LOG_LINES)
    if not term:
        answer = _logs_answer(intent, state, known, namespace)
        answer.notes.append("The question names no term to look for; the logs are quoted instead.")
        return answer
    pattern = rx.compile(rx.escape(term), rx.IGNORECASE)
    matches = [(pod, line) for pod, lines in reads for line in lines if pattern.search(line)]
    total = sum(len(lines) for _, lines in reads)
    scope = scope_phrase(intent, known, namespace) or ", ".join(p for p, _ in reads)
    if matches:
        headline = f"{len(matches)} of {total} log lines of {scope} contain {term!r}."
    else:
        headline = f"No line of the {total} log lines of {scope} contains {term!r}."
    return Answer(
        intent=intent.kind,
        shape=LOG_LINES,
        headline=headline,
        value=len(matches),
        counted=f"log lines containing {term!r}",
        lines=[_line(pod, line) for pod, line in matches[: intent.limit or _LOG_LINES_SHOWN]],
        notes=notes,
        confidence=confidence_of(reads=len(reads) + len(notes), empty=len(notes)),
        sources=[p for p, _ in reads],
    )


def _errors(intent: Intent, state: AnalysisState, known: list[Resolution], namespace: str) -> Answer:
    reads, notes = _read_logs(intent, state, known)
    groups = merge_groups(
        [
            g
            for pod, lines in reads
            for g in group_errors(error_events("\n".join(lines), intent.window), source=pod)
        ]
    )
    warnings = _warning_events(state, known)
    scope = scope_phrase(intent, known, namespace) or ", ".join(p for p, _ in reads) or "what was asked about"
    if not reads and not warnings:
        return _empty_logs_answer(intent, known, namespace, notes, ERROR_GROUPS)
    total = sum(g.count for g in groups)
    if groups:
        kinds = ", ".join(dict.fromkeys(g.category for g in groups))
        headline = f"{total} error lines in the logs of {scope}, in {len(groups)} groups ({kinds})."
    elif reads:
        # An empty filtered read over logs that have data is a finding: zero errors.
        headline = (
            f"{scope} logged no error line: 0 errors in the {sum(len(ln) for _, ln in reads)} log lines "
            "that were read."
        )
    else:
        headline = f"No log of {scope} could be read."
    if warnings:
        headline += f" Warning events: {'; '.join(warnings[:5])}."
    return Answer(
        intent=intent.kind,
        shape=ERROR_GROUPS,
        headline=headline,
        value=total,
        counted="error lines",
        groups=[g.to_json() for g in groups],
        notes=notes,
        confidence=confidence_of(reads=len(reads) + len(notes), empty=len(notes)),
        sources=[p for p, _ in reads],
    )


def _warning_events(state: AnalysisState, known: list[Resolution]) -> list[str]:
    names = {m.name for r in known for m in r.matches} | {r.name for r in known}
    found: list[str] = []
    for out in state.outputs:
        subject = str(out.params.get("name") or out.params.get("resource_name") or "")
        if not has_data(out) or (names and subject and subject not in names):
            continue
        for event in parse_events(normalize(out.text)):
            line = f"{event.reason}: {event.message[:200]}" + (
                f" (x{event.count})" if event.count > 1 else ""
            )
            if event.type == "Warning" and line not in found:
                found.append(line)
    return found


def problem_findings(findings: list[Finding]) -> list[str]:
    return [f.summary for f in findings if f.is_problem][:5]
