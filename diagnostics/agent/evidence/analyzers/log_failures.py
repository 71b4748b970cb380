"""A log's recurring, current failure: the error-class lines ranked over the noise around them.

A line is failure-class when its logger marks it an error (logtemplates.is_error_line) or marks it a
warning and says that something failed (``failed``, ``err=``, ``error:``). Such lines are grouped by
template (drain3, as the questions' error answers do); a group repeated at least three times whose
last line is among the log's latest is the log's current failure, and its message (a logfmt line's
``msg`` and ``err``, a JSON line's error) is quoted, whatever component wrote it. Ranked below every
specific explanation: it says what the log keeps reporting when nothing more specific does.

An access-log line (a request and its status: Common/Combined Log Format, or a logfmt or JSON line with a
method and a status) says that requests fail, not why: where the application's own error lines also
repeat, currently, they are the failure quoted, however many more status lines there are.

Prometheus' own vector-matching errors ("many-to-many matching not allowed", "found duplicate series
for the match group") are explained from the series the error lists: the labels in which they differ
say that one series now comes from several targets.
"""

from __future__ import annotations

from datetime import timedelta

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.evidence.logtemplates import (
    ErrorEvent,
    group_errors,
    is_error_line,
    is_warning_line,
    message_of,
)
from diagnostics.agent.findings import Finding, Severity
from diagnostics.agent.request.timewindow import line_time

MIN_REPEATS = 3
# The latest lines of a log: its last timestamp minus this, or its last tenth.
CURRENT = timedelta(minutes=10)
_FAILS = rx.compile(r"\bfail(?:ed|ure|s)?\b|\berr=|\berror[:=]", rx.IGNORECASE)
_DUPLICATES = rx.compile(
    r"found duplicate series for the match group|many-to-many matching not allowed", rx.I
)
_WORDS = {2: "two", 3: "three", 4: "four"}
_METHODS = r"(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS|CONNECT|TRACE)"
_REQUEST_LINE = rx.compile(rf"\"{_METHODS} [^\"\s]+(?: HTTP/[0-9.]+)?\" [1-5][0-9][0-9]\b")
_METHOD_FIELD = rx.compile(
    rf"\b\"?(?:method|http_method|request_method|verb)\"?\s*[=:]\s*\"?{_METHODS}\b", rx.I
)
_STATUS_FIELD = rx.compile(
    r"\b\"?(?:status|status_code|statuscode|http_status|code)\"?\s*[=:]\s*\"?[1-5][0-9][0-9]\b", rx.I
)
_SERIES = rx.compile(r"\{([^{}]*)\}")
_LABEL = rx.compile(r"(\w+)=\\?\"([^\"\\]*)\\?\"")


def access_line(line: str) -> bool:
    """Whether ``line`` is an access-log line: a request and the status it was answered with."""
    head = line[:2000]
    return bool(_REQUEST_LINE.search(head) or (_METHOD_FIELD.search(head) and _STATUS_FIELD.search(head)))


def _failure_line(line: str) -> bool:
    return is_error_line(line) or (is_warning_line(line) and bool(_FAILS.search(line)))


def _logfmt(line: str) -> dict[str, str]:
    """A logfmt line's msg, err (the rest of the line: its quoted value may hold quotes and newlines
    once unescaped), and the group, name and rule it names."""
    fields: dict[str, str] = {}
    for key in ("msg", "group", "name"):
        match = rx.search(rf"\b{key}=(?:\"([^\"]*)\"|(\S+))", line)
        if match:
            fields[key] = match.group(1) if match.group(1) is not None else match.group(2)
    err = rx.search(r"\b(?:err|error)=(.*)$", line)
    if err:
        fields["err"] = err.group(1).strip().strip('"')
    rule = rx.search(r"\brule=\"?(.*?)(?:\"?\s+\b(?:err|error)=|$)", line)
    if rule:
        fields["rule"] = rule.group(1)
    return fields


def _joined(lines: list[str]) -> list[str]:
    """Lines without a timestamp of their own continue the line before them (a quoted value's newlines)."""
    if sum(1 for ln in lines if line_time(ln) is not None) < len(lines) // 2:
        return lines
    out: list[str] = []
    for line in lines:
        if out and line_time(line) is None:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def _what(line: str) -> str:
    """What a failure line says: a logfmt line's msg and err (and the rule it names), else its message."""
    fields = _logfmt(line)
    if "msg" in fields and "err" in fields:
        about = " ".join(f"{k}={fields[k]}" for k in ("group", "name") if k in fields)
        return f"{fields['msg']}{f' ({about})' if about else ''}: {fields['err']}"
    return message_of(line)


def _differing_labels(message: str) -> str:
    """For a vector-matching error: 'series differ only in instance (a, b)'; '' when it lists none."""
    listed = rx.search(r"\[(\{.*\})\]", message)  # the series the error lists, not its match group
    series = [dict(_LABEL.findall(body)) for body in _SERIES.findall(listed.group(1) if listed else "")]
    series = [s for s in series if s]
    if len(series) < 2:
        return ""
    keys = sorted({k for s in series for k in s})
    differing = [k for k in keys if len({s.get(k, "") for s in series}) > 1]
    if not differing:
        return ""
    metric = series[0].get("__name__", "the series")
    values = "; ".join(f"{k}: {', '.join(dict.fromkeys(s.get(k, '') for s in series))}" for k in differing)
    job = series[0].get("job") or series[0].get("container") or ""
    count = _WORDS.get(len(series), str(len(series)))
    return (
        f"many-to-many matching is not allowed: {count} series of {metric} differ only in "
        f"{', '.join(differing)} ({values}): the same series now "
        f"comes from {count} targets{f' ({count} instances of {job})' if job else ''}, so the "
        "matching labels are no longer unique on one side and the expression fails at every evaluation"
    )


@register
class RecurringLogFailureAnalyzer(Analyzer):
    name = "recurring_log_failures"

    def applies(self, out: ToolOutput) -> bool:
        return out.is_log and out.tool != "alert" and bool(out.text.strip())

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        lines = _joined([ln for ln in out.text.splitlines() if ln.strip()])
        times = [t for t in (line_time(ln) for ln in lines) if t is not None]
        events = [
            ErrorEvent(ln.strip(), line_time(ln), "failure", [ln.strip()])
            for ln in lines
            if _failure_line(ln)
        ]
        if len(events) < MIN_REPEATS:
            return []
        source, subject, where = log_subject(out, state)
        groups = [g for g in group_errors(events, source=source) if g.count >= MIN_REPEATS]
        if not groups:
            return []
        latest = max(times) if times else None
        tail = set(lines[-max(5, len(lines) // 10) :])

        def current(group_example: str, last_seen: object) -> bool:
            if latest is not None and last_seen is not None:
                return bool(latest - last_seen <= CURRENT)  # type: ignore[operator]
            return group_example in tail

        groups = [g for g in groups if current(g.example, g.last_seen)]
        if not groups:
            return []
        # The application's own error lines before access-log status lines (a stable sort: most repeated
        # first within each).
        group = sorted(groups, key=lambda g: access_line(g.example))[0]
        full = next((e.line for e in events if e.line.startswith(group.example)), group.example)
        what = _what(full)
        explained = _differing_labels(what) if _DUPLICATES.search(what) else ""
        rule = _logfmt(full).get("rule", "")
        recorded = rx.search(r"record:\s*([\w:]+)", rule)
        first = group.first_seen.isoformat() if group.first_seen else ""
        span = (
            f" from {first} to {group.last_seen.isoformat()}" if group.first_seen and group.last_seen else ""
        )
        summary = (
            (f"The recording rule {recorded.group(1)} fails: " if recorded else "")
            + f"{where.replace(' in the logs of', 'the log of').strip() or 'the log'} repeats one failure "
            + f"{group.count} times{span}, still current: {clip(what, 420)}"
            + (f". {explained}" if explained else "")
            + "."
        )
        return [
            Finding(
                "recurring_log_failure",
                summary,
                Severity.CRITICAL if explained else Severity.WARNING,
                subject or source,
                clip(group.example, 300),
                74 if explained else 45,
                at=group.last_seen.isoformat() if group.last_seen else "",
            )
        ]
