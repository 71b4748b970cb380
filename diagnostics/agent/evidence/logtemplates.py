"""Errors in logs, grouped by signature: which lines are errors, and which errors are the same error.

An error event is a line the application or its runtime flags (a level of ERROR/FATAL/PANIC/CRITICAL, a
JSON ``level`` of 50 or more, an exception or a traceback with its frames) or one that states an
application-level failure in words (SQL syntax errors, duplicate keys, deadlocks, database and upstream
timeouts, refused or reset connections, a peer that went away, a full disk, denied permissions, HTTP
5xx answers). A stack trace's frames join the line that opened it.

Events are grouped by template mining (drain3, the Drain algorithm): variable parts (numbers, ids,
addresses, quoted values) are masked and lines that differ only there share one template. Each group
keeps its count, first and last time seen, and an example line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from drain3 import TemplateMiner
from drain3.masking import MaskingInstruction
from drain3.template_miner_config import TemplateMinerConfig

from diagnostics.agent import rx
from diagnostics.agent.request.timewindow import TimeWindow, line_time
from routing.json_body import loads_answer

_LEVEL = rx.compile(
    r"(?:^|[\s\[|:\"])(?:ERROR|ERR|FATAL|PANIC|CRITICAL|CRIT|SEVERE|EMERG|ALERT)(?:[\s\]|:\"]|$)"
    r"|\"level\"\s*:\s*(?:5\d|6\d)\b|\"(?:level|severity|lvl)\"\s*:\s*\"(?:error|fatal|critical|panic)\""
    r"|\blevel=(?:error|fatal|panic|critical)\b|^E\d{4} "
)
_WARN = rx.compile(r"(?:^|[\s\[|:\"])(?:WARN|WARNING)(?:[\s\]|:\"]|$)|\"level\"\s*:\s*40\b|\blevel=warn")
_INFO_ONLY = rx.compile(
    r"(?:^|[\s\[|:\"])(?:INFO|DEBUG|TRACE|NOTICE)(?:[\s\]|:\"]|$)|\"level\"\s*:\s*[1-3]0\b"
)
# Application failures stated in words, whatever level the line carries.
CATEGORIES: tuple[tuple[str, rx.Pattern], ...] = (
    (
        "sql syntax error",
        rx.compile(r"syntax error at or near|SQL syntax|sqlstate\W*42601|syntax error in SQL", rx.I),
    ),
    (
        "duplicate key",
        rx.compile(r"duplicate key|unique constraint|Duplicate entry|UniqueViolation|E11000", rx.I),
    ),
    ("deadlock", rx.compile(r"\bdeadlock", rx.I)),
    (
        "database timeout",
        rx.compile(
            r"(?:database|db|sql|query|postgres\w*|mysql|connection pool|"
            r"pool)\W.{0,60}?(?:timed? ?out|timeout)|"
            r"statement timeout|canceling statement due to|lock wait timeout|QueryTimeout|"
            r"All host\(s\) tried for (?:db )?query failed",
            rx.I,
        ),
    ),
    (
        "peer disconnected",
        rx.compile(
            r"connection reset by peer|peer (?:closed|disconnected|went away|reset)|broken pipe|"
            r"unexpected EOF|server closed the connection unexpectedly|ECONNRESET|EPIPE|"
            r"client disconnected|upstream prematurely closed",
            rx.I,
        ),
    ),
    (
        "connection refused",
        rx.compile(
            r"connection refused|ECONNREFUSED|could not connect|failed to connect|no route to host", rx.I
        ),
    ),
    ("timeout", rx.compile(r"timed? ?out|deadline exceeded|ETIMEDOUT|\btimeout\b", rx.I)),
    (
        "tls error",
        rx.compile(r"x509|certificate (?:has expired|verify failed|is not valid)|tls: |handshake fail", rx.I),
    ),
    (
        "name resolution",
        rx.compile(
            r"could not resolve|Name or service not known|no such host|NXDOMAIN|"
            r"could not translate host|EAI_AGAIN|getaddrinfo",
            rx.I,
        ),
    ),
    ("disk full", rx.compile(r"No space left on device|disk (?:is )?full|ENOSPC", rx.I)),
    (
        "permission denied",
        rx.compile(r"permission denied|forbidden|EACCES|access denied|unauthorized", rx.I),
    ),
    (
        "out of memory",
        rx.compile(r"out of memory|OutOfMemoryError|OOMKilled|Cannot allocate memory", rx.I),
    ),
    (
        "http 5xx",
        rx.compile(
            r"HTTP/\d(?:\.\d)?\"?\s5\d\d\b|\b(?:GET|POST|PUT|PATCH|DELETE|HEAD)\s+/\S*\s+5\d\d\b|"
            r"\"statusCode\"\s*:\s*5\d\d|\bstatus(?:_code)?[=:]\s*5\d\d\b"
        ),
    ),
    (
        "exception",
        rx.compile(
            r"Traceback \(most recent call last\)|(?:[A-Za-z_$][\w$]*\.)*[A-Z]\w*(?:Exception|"
            r"Error)\b(?::|$| in )"
        ),
    ),
    (
        "failure",
        rx.compile(
            r"\b(?:failed|failure|unable to|cannot|can't|could not|refused|invalid|unhandled|aborted|"
            r"terminated by signal|segmentation fault|core dumped)\b",
            rx.I,
        ),
    ),
)
_FRAME = rx.compile(
    r"^(?:\s+at\s|\s+File \"|\s*\.\.\. \d+ more|\s*Caused by:|\s+\^|\s{4,}\S|\t|goroutine \d+|\s*Traceback)"
)
_NOT_ERROR = rx.compile(
    r"\b(?:0 errors?|no errors?|errors?=0|error_count\W+0|without errors?|errors?: none|failed=0)\b", rx.I
)

logging.getLogger("drain3").setLevel(logging.WARNING)

_MASKS = (
    MaskingInstruction(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?", "TIME"),
    MaskingInstruction(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "ID"),
    MaskingInstruction(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b", "IP"),
    MaskingInstruction(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{12,}\b", "HEX"),
    MaskingInstruction(r"(?<=[^A-Za-z0-9])-?\d+(?:\.\d+)?(?=[^A-Za-z0-9]|$)", "NUM"),
    MaskingInstruction(r"'[^']{1,80}'", "STR"),
)


@dataclass
class ErrorEvent:
    line: str
    time: datetime | None
    category: str
    lines: list[str] = field(default_factory=list)  # the line and its stack frames


@dataclass
class ErrorGroup:
    template: str
    category: str
    count: int
    first_seen: datetime | None
    last_seen: datetime | None
    example: str
    sources: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.template,
            "category": self.category,
            "count": self.count,
            "first_seen": self.first_seen.isoformat() if self.first_seen else None,
            "last_seen": self.last_seen.isoformat() if self.last_seen else None,
            "example": self.example,
            "sources": self.sources,
        }


def category_of(line: str) -> str:
    """The application-level failure a line states, or '' when it states none."""
    if _NOT_ERROR.search(line):
        return ""
    return next((name for name, pattern in CATEGORIES if pattern.search(line)), "")


def is_error_line(line: str) -> bool:
    if _NOT_ERROR.search(line) and not _LEVEL.search(line):
        return False
    if _LEVEL.search(line):
        return True
    category = category_of(line)
    if not category:
        return False
    # A plain "failed"/"timeout" in a line its own logger marks INFO is not an error (e.g. "retry failed=0").
    return not (_INFO_ONLY.search(line) and category in ("failure", "timeout"))


def is_warning_line(line: str) -> bool:
    return bool(_WARN.search(line))


def error_events(text: str, window: TimeWindow | None = None) -> list[ErrorEvent]:
    """The error events of a log, a stack trace's frames joined to the line that opened it; lines with a
    timestamp outside ``window`` are left out."""
    events: list[ErrorEvent] = []
    current: ErrorEvent | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.strip() in ("stdout:", "stderr:"):
            continue
        if current is not None and _FRAME.match(line):
            current.lines.append(line)
            continue
        current = None
        if not is_error_line(line):
            continue
        moment = line_time(line)
        if window is not None and moment is not None and not window.contains(moment):
            continue
        message = message_of(line)
        category = category_of(message) or category_of(line) or "error"
        current = ErrorEvent(line.strip(), moment, category, [line.strip()])
        events.append(current)
    for event in events:
        if len(event.lines) > 1 and event.category in ("error", "failure"):
            event.category = "stack trace"
    return events


def _json_message(line: str) -> str:
    """What a JSON log line says happened: its error's type and message, else its message."""
    start = line.find("{")
    if start == -1 or start > 40:
        return ""
    try:
        value = loads_answer(line[start:])
    except ValueError:
        return ""
    if not isinstance(value, dict):
        return ""
    err = value.get("err") or value.get("error") or value.get("exception")
    parts: list[str] = []
    if isinstance(err, dict):
        parts.append(f"{err.get('type') or 'Error'}: {err.get('message') or ''}".strip())
    elif isinstance(err, str):
        parts.append(err)
    message = value.get("msg") or value.get("message")
    if isinstance(message, str) and message:
        parts.append(message)
    res = value.get("res")
    if isinstance(res, dict) and res.get("statusCode"):
        parts.append(f"status {res['statusCode']}")
    return " - ".join(parts)


def message_of(line: str) -> str:
    """The part of a line that says what happened (a JSON line's error or message); drain3 masks
    timestamps, ids and numbers."""
    json_message = _json_message(line)
    if json_message:
        return json_message[:500]
    return rx.sub(r"^\W*(?:\S+\s+)??((?:ERROR|FATAL|PANIC|CRITICAL|WARN\w*)\b)", r"\1", line)[:500]


def group_errors(events: list[ErrorEvent], *, source: str = "") -> list[ErrorGroup]:
    """Groups ``events`` by drain3 template; most frequent first."""
    config = TemplateMinerConfig()
    config.masking_instructions = list(_MASKS)
    config.profiling_enabled = False
    config.drain_sim_th = 0.5
    miner = TemplateMiner(config=config)
    groups: dict[int, ErrorGroup] = {}
    for event in events:
        result = miner.add_log_message(message_of(event.line))
        cluster_id = int(result["cluster_id"])
        group = groups.get(cluster_id)
        if group is None:
            group = ErrorGroup("", event.category, 0, event.time, event.time, event.line[:400])
            groups[cluster_id] = group
        group.count += 1
        if event.time is not None:
            group.first_seen = min(filter(None, (group.first_seen, event.time)))
            group.last_seen = max(filter(None, (group.last_seen, event.time)))
        if source and source not in group.sources:
            group.sources.append(source)
    for cluster_id, group in groups.items():
        cluster = miner.drain.id_to_cluster.get(cluster_id)
        group.template = cluster.get_template() if cluster is not None else group.example
    return sorted(
        groups.values(), key=lambda g: (-g.count, g.first_seen.timestamp() if g.first_seen else float("inf"))
    )


def merge_groups(groups: list[ErrorGroup]) -> list[ErrorGroup]:
    """Groups of several sources (e.g. the pods of one deployment) with the same template, merged."""
    merged: dict[str, ErrorGroup] = {}
    for group in groups:
        same = merged.get(group.template)
        if same is None:
            merged[group.template] = ErrorGroup(
                group.template,
                group.category,
                group.count,
                group.first_seen,
                group.last_seen,
                group.example,
                list(group.sources),
            )
            continue
        same.count += group.count
        times = [t for t in (same.first_seen, group.first_seen) if t is not None]
        same.first_seen = min(times) if times else None
        times = [t for t in (same.last_seen, group.last_seen) if t is not None]
        same.last_seen = max(times) if times else None
        same.sources += [s for s in group.sources if s not in same.sources]
    return sorted(merged.values(), key=lambda g: -g.count)
