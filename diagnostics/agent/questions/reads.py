"""What the question answers read the same way (``question_answers``, ``question_timeline``,
``question_restarts``): which reads hold data, a raw log as lines, a line's place in the asked window, the
pods of the resolved names, and the phrase naming what was asked about."""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.evidence.inventory import Resolution, Row
from diagnostics.agent.request.intent import Intent
from diagnostics.agent.request.timewindow import line_time


def leading_number(text: str) -> int:
    """The number a listing's column starts with (RESTARTS ``3 (5m ago)``: 3; none: 0)."""
    match = rx.match(r"\d+", text or "")
    return int(match.group(0)) if match else 0


def resolved_pods(resolved: list[Resolution], state: AnalysisState) -> list[Row]:
    """The pods of the resolved names, each once, in the order found."""
    found: list[Row] = []
    for resolution in resolved:
        found += [p for p in state.inventory.pods_of(resolution) if p not in found]
    return found


def has_data(out: ToolOutput) -> bool:
    """Whether a read succeeded and returned something besides empty stream headers."""
    body = "\n".join(
        line for line in out.text.splitlines() if line.strip() not in ("stdout:", "stderr:") and line.strip()
    )
    return out.ok and not out.no_data and bool(body.strip())


def log_lines(text: str) -> list[str]:
    """The lines of a raw log; a non-JSON line that carries escaped newlines (a log recorded inside a JSON
    string) is unescaped, a JSON line is kept whole."""
    lines: list[str] = []
    for raw in text.splitlines():
        if raw.lstrip().startswith("{") or "\\n" not in raw:
            lines.append(raw)
        else:
            lines += raw.replace('\\"', '"').replace("\\t", "\t").split("\\n")
    return [line.rstrip() for line in lines if line.strip() and line.strip() not in ("stdout:", "stderr:")]


def in_window(line: str, intent: Intent) -> bool:
    """Whether a log line falls in the asked window (a line without a time, or no window: yes)."""
    if intent.window is None:
        return True
    moment = line_time(line)
    return moment is None or intent.window.contains(moment)


def scope_phrase(intent: Intent, resolved: list[Resolution], namespace: str) -> str:
    """What was asked about, in words: the names, the namespace and the window."""
    names = ", ".join(r.name for r in resolved) or ""
    where = f" in namespace {namespace}" if namespace else ""
    window = f" ({intent.window.phrase.rstrip('?.!')})" if intent.window else ""
    return f"{names}{where}{window}".strip()
