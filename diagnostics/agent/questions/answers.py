"""Answer shapes: what a question gets back, as data (for the API and Slack) and as text.

Shapes: ``number`` (a count and what was counted, with the rows counted), ``table`` (a listing),
``log_lines`` (quoted lines with their timestamps and sources), ``error_groups`` (errors grouped by
signature with counts and first/last seen), ``timeline`` (moments in order), ``explanation`` (a finding
and what it means), ``diagnosis`` (a root-cause investigation), ``question`` (a name that matched
nothing or several things: what matched, and what to say next), ``metric`` (a value Prometheus computed: the
number with its unit and time, and the query).

Every answer says what it could not see (``notes``) and how sure it is (``confidence``). An answer
built on empty reads is ``no_data``: it says so and never calls anything healthy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NUMBER, TABLE, LOG_LINES, ERROR_GROUPS, TIMELINE, EXPLANATION, DIAGNOSIS, QUESTION = (
    "number",
    "table",
    "log_lines",
    "error_groups",
    "timeline",
    "explanation",
    "diagnosis",
    "question",
)
METRIC = "metric"
HIGH, MEDIUM, LOW = "high", "medium", "low"
TEXT_ROWS = 25


@dataclass
class Answer:
    intent: str
    shape: str
    headline: str
    value: int | None = None
    counted: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    lines: list[dict[str, str]] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, str]] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    matched: list[dict[str, Any]] = field(default_factory=list)
    window: dict[str, Any] | None = None
    no_data: bool = False
    confidence: str = HIGH
    sources: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "intent": self.intent,
            "shape": self.shape,
            "headline": self.headline,
            "confidence": self.confidence,
            "no_data": self.no_data,
        }
        optional: dict[str, Any] = {
            "value": self.value,
            "counted": self.counted,
            "columns": self.columns,
            "rows": self.rows[:200],
            "lines": self.lines[:200],
            "groups": self.groups[:50],
            "events": self.events[:100],
            "details": self.details,
            "notes": self.notes,
            "matched": self.matched,
            "window": self.window,
            "sources": self.sources,
        }
        data.update({k: v for k, v in optional.items() if v not in (None, "", [], {})})
        return data

    def text(self) -> str:
        """The answer as plain text (the diagnosis of a trajectory, a Slack message, the grader's input)."""
        out = [self.headline]
        if self.shape in (NUMBER, TABLE) and self.rows:
            out.append(" | ".join(self.columns))
            out += [" | ".join(row) for row in self.rows[:TEXT_ROWS]]
            if len(self.rows) > TEXT_ROWS:
                out.append(f"… and {len(self.rows) - TEXT_ROWS} more rows")
        if self.groups:
            out.append("Error groups (count, first seen, last seen, signature):")
            for group in self.groups[:15]:
                seen = f"{group.get('first_seen') or '-'} .. {group.get('last_seen') or '-'}"
                out.append(f"- {group['count']} times [{group['category']}] {seen}: {group['signature']}")
                if group.get("example") and group["example"] != group["signature"]:
                    out.append(f"  e.g. {group['example'][:300]}")
        if self.lines:
            out.append("Log lines:")
            out += [_quoted(line) for line in self.lines[:40]]
            if len(self.lines) > 40:
                out.append(f"… and {len(self.lines) - 40} more lines")
        if self.events:
            out.append("Timeline:")
            out += [f"- {e.get('time') or '?'} {e.get('source', '')}: {e['what']}" for e in self.events[:40]]
        out += self.details
        if self.notes:
            out.append("Could not see: " + " ".join(self.notes))
        out.append(f"Confidence: {self.confidence}{' (the reads were empty)' if self.no_data else ''}.")
        return "\n".join(line for line in out if line)


def _quoted(line: dict[str, str]) -> str:
    where = f"[{line['source']}] " if line.get("source") else ""
    when = f"{line['time']} " if line.get("time") and line["time"] not in line.get("text", "") else ""
    return f"> {where}{when}{line.get('text', '')[:400]}"


def confidence_of(*, reads: int, empty: int) -> str:
    """High when every read the answer rests on returned data, low when none did."""
    if reads == 0 or empty >= reads:
        return LOW
    return HIGH if empty == 0 else MEDIUM
