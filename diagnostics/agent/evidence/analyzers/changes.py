"""What changed, and what broke after it: change logs, memory exhaustion, backlogs, and the
regression that ties a problem of a service to a recent change of that service.

- ``changed SERVICE.KEY: OLD -> NEW at WHEN by WHO`` lines (a config history or audit log; values
  are JSON) become facts and info findings.
- Memory exhaustion in logs (MemoryError, out of memory, OOMKilled, a memory limit exhausted).
- A process group configured with zero processes, and a job queue that keeps growing.
- The correlator: a problem on a service that has a recorded change becomes a ``config_regression``
  finding whose remedy reverts the change (restore the old value, or scale back to the old count).
  Reverting the change that introduced a regression is the first mitigation an SRE reaches for: it
  restores a state known to work, where a restart would only replay the fault.
- ``blame_current`` judges each regression again once freshness has settled what is history: a change is
  blamed only for a current problem of its service that began after it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from diagnostics import conf as diagnostics_conf
from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    register,
    register_correlator,
    service_of,
)
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.findings import Finding, Remedy, Severity
from routing.json_body import loads_answer

_CHANGE = rx.compile(r"^\s*changed ([\w-]+)\.([\w.-]+): (.+?) -> (.+?) at (\S+) by (.+?)\s*$", rx.MULTILINE)
_OOM = rx.compile(
    r"MemoryError|out of memory|OOMKilled|OOM[- ]kill|Cannot allocate memory"
    r"|memory limit[^\n]{0,60}exhausted",
    rx.IGNORECASE,
)
_KEY_VALUE = rx.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)=([\w.\"'-]+)")
_NO_PROCESSES = rx.compile(r"\((\w+?)s? configured: 0\)")
_QUEUE = rx.compile(
    r"^(\w*(?:queue_depth|queue_length|queue_size|backlog)\w*)(?:\{[^}\n]*\})?\s+(\d+(?:\.\d+)?)\s*$",
    rx.MULTILINE,
)
_SECTION = rx.compile(r"^==\s*([\w.-]+)\s*:?", rx.MULTILINE)
# Keys whose value is a process count: reverting them is a scale action, not a config patch.
COUNT_KEYS = ("workers", "replicas", "numprocs")
NOT_PROBLEMS = ("config_change", "config_regression")


@dataclass(frozen=True)
class Change:
    service: str
    key: str
    old: Any
    new: Any
    at: str
    by: str

    @property
    def label(self) -> str:
        return f"{self.service}.{self.key}"


def _value(text: str) -> Any:
    try:
        return loads_answer(text)
    except ValueError:  # not JSON, or nested past the answer depth bound: the text itself
        return text


def _shown(value: Any) -> str:
    return json.dumps(value)


@register
class ChangeLogAnalyzer(Analyzer):
    name = "change_log"

    def applies(self, out: ToolOutput) -> bool:
        return _CHANGE.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        changes = state.fact_dict("changes")
        findings = []
        for match in _CHANGE.finditer(out.text):
            change = Change(
                match.group(1),
                match.group(2),
                _value(match.group(3)),
                _value(match.group(4)),
                match.group(5),
                match.group(6),
            )
            changes[change.label] = change  # the newest change of a key wins
            findings.append(
                Finding(
                    "config_change",
                    f"{change.label} was changed from {_shown(change.old)} to {_shown(change.new)} at "
                    f"{change.at} by {change.by}.",
                    Severity.INFO,
                    change.service,
                    clip(match.group(0)),
                    40,
                )
            )
        return findings


_KILLED = rx.compile(r"OOMKilled|OOM[- ]kill|Killed process|oom_kill", rx.IGNORECASE)


def _killed(lines: list[str]) -> str:
    """' and is killed (OOMKilled)' only when a line says the kill: a runtime's own out-of-memory error
    (MemoryError, OutOfMemoryError, ENOMEM) is no kill, and no read of the pod showed one."""
    return " and is killed (OOMKilled)" if any(_KILLED.search(line) for line in lines) else ""


@register
class MemoryExhaustionAnalyzer(Analyzer):
    name = "memory_exhaustion"

    def applies(self, out: ToolOutput) -> bool:
        return out.is_log and _OOM.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        source, subject, where = log_subject(out, state)
        lines = [line for line in out.text.splitlines() if _OOM.search(line)]
        line = lines[-1]
        named = dict(_KEY_VALUE.findall(line))
        if named:
            state.fact_dict("named_keys").setdefault(service_of(subject), set()).update(named)
        sizing = ", ".join(f"{k}={v}" for k, v in named.items())
        limit = rx.search(r"memory limit (\d+\s*[KMG]i?B)", line)
        return [
            Finding(
                "oom_killed",
                f"{source or 'The application'} runs out of memory{_killed(lines)}{where}"
                f"{f', over its memory limit of {limit.group(1)}' if limit else ''}"
                f"{f' with {sizing}' if sizing else ''} ({len(lines)} times): '{clip(line, 160)}'.",
                Severity.CRITICAL,
                subject,
                clip(line),
                88,
                "Lower what sizes the allocation"
                + (f" ({sizing})" if sizing else "")
                + " or raise the memory limit; if a recent change raised it, revert that change.",
            )
        ]


@register
class CapacityAnalyzer(Analyzer):
    """A process group configured with no process, and a queue that piles up."""

    name = "capacity"

    def applies(self, out: ToolOutput) -> bool:
        return _NO_PROCESSES.search(out.text) is not None or _QUEUE.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        findings = []
        for match in _NO_PROCESSES.finditer(out.text):
            group = match.group(1)
            findings.append(
                Finding(
                    "scaled_to_zero",
                    f"No {group} process runs: the {group} group is configured with 0 processes, so "
                    "nothing consumes its work.",
                    Severity.CRITICAL,
                    group,
                    clip(match.group(0)),
                    80,
                    f"Scale the {group} group back up.",
                    Remedy(("scale_workers", "scale"), group, {"count": 1}, f"scale {group} to 1"),
                )
            )
        threshold = diagnostics_conf.get().analyzers.queue_depth
        default = str(out.params.get("service") or out.params.get("name") or "")
        sections = [(m.start(), m.group(1)) for m in _SECTION.finditer(out.text)]
        for match in _QUEUE.finditer(out.text):
            depth = float(match.group(2))
            if depth < threshold:
                continue
            target = next((name for start, name in reversed(sections) if start < match.start()), default)
            findings.append(
                Finding(
                    "queue_backlog",
                    f"Work piles up: {match.group(1)} is {depth:.0f} on {target or 'the service'} "
                    f"(threshold {threshold:.0f}); its consumers are missing or too slow.",
                    Severity.WARNING,
                    target,
                    clip(match.group(0)),
                    60,
                    "Check that the queue's consumers run and keep up.",
                )
            )
        return findings


def _revert(change: Change) -> Remedy | None:
    if change.old is None:
        return None  # the key did not exist before: nothing to restore
    if change.key in COUNT_KEYS and isinstance(change.old, int):
        return Remedy(
            ("scale_workers", "scale"),
            change.service,
            {"count": change.old},
            f"scale {change.service} back to {change.old}",
        )
    return Remedy(
        ("patch_config", "set_config", "update_config"),
        change.service,
        {"key": change.key, "value": change.old},
        f"revert {change.label} to {_shown(change.old)}",
    )


def _blamed(change: Change, problem: str) -> str:
    return (
        f"The trouble of {change.service} follows a change: {change.label} was changed from "
        f"{_shown(change.old)} to {_shown(change.new)} at {change.at} by {change.by} "
        f"(then: {clip(problem, 160)})."
    )


@register_correlator
def regressions(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """A problem on a service that has a recorded change: the change is the suspect; revert it."""
    problems = state.fact_dict("problems")
    for finding in findings:
        if finding.is_problem and finding.kind not in NOT_PROBLEMS:
            problems.setdefault(service_of(finding.subject), []).append(finding.summary)
    reported = state.fact_set("regressions")
    out = []
    for label, change in state.fact_dict("changes").items():
        seen = problems.get(change.service)
        if not seen or label in reported:
            continue
        reported.add(label)
        named = change.key in state.fact_dict("named_keys").get(change.service, set())
        out.append(
            Finding(
                "config_regression",
                _blamed(change, seen[0]),
                Severity.CRITICAL,
                change.service,
                f"changed {change.label}: {_shown(change.old)} -> {_shown(change.new)}",
                93 if named else 90,
                f"Revert {change.label} to {_shown(change.old)} (the value before the change), then find "
                "out why it was changed.",
                _revert(change),
            )
        )
    return out


def _change_at(change: Change) -> datetime | None:
    try:
        moment = datetime.fromisoformat(str(change.at).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def blame_current(
    findings: list[Finding], state: AnalysisState, began: Callable[[Finding], datetime | None]
) -> list[Finding]:
    """``findings`` with each ``config_regression`` judged again on what is current (after ``settle``):
    a change is blamed only for a current problem of its service that began after it (``began``: when a
    problem began; None, unknown, counts). A change whose service's problems are all history, or all began
    before it, is no suspect: kept as information (history when they were), with no remedy."""
    by_label = {change.label: change for change in state.fact_dict("changes").values()}
    since = state.window.since if state.window is not None else None
    judged = []
    for finding in findings:
        label = finding.evidence.removeprefix("changed ").split(": ", 1)[0]
        change = by_label.get(label)
        made = _change_at(change) if change is not None else None
        if (
            finding.kind != "config_regression"
            or change is None
            or (finding.history and since and made and made < since)
        ):
            judged.append(finding)  # not a regression, or a change older than the evidence window
            continue
        own = [f for f in findings if f.kind not in NOT_PROBLEMS and service_of(f.subject) == change.service]
        current = [f for f in own if f.is_problem]
        after = [f for f in current if made is None or (start := began(f)) is None or start >= made]
        if after:  # blamed on what is current (settle may have read the stale problem it first cited)
            judged.append(replace(finding, summary=_blamed(change, after[0].summary), history=False))
            continue
        if current:
            first = min((t for f in current if (t := began(f)) is not None), default=made)
            why = f"its current problems began before it (first seen {_stamp(first)})"
        else:
            why = "its problems seen are history (they stopped)"
        judged.append(
            replace(
                finding,
                summary=f"{change.label} was changed from {_shown(change.old)} to {_shown(change.new)} at "
                f"{change.at} by {change.by}, but {why}: the change is not blamed.",
                severity=Severity.INFO,
                rank=20,
                fix="",
                remedy=None,
                history=not current and any(f.history and f.severity >= Severity.WARNING for f in own),
            )
        )
    return judged


def _stamp(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else "unknown"
