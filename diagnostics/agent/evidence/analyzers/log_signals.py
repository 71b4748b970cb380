"""Logs (and alert text) -> signals: slow requests served (latency; not work done: durations.py), exceptions,
HTTP error-rate spikes."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from diagnostics import conf as diagnostics_conf
from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.durations import SERVED, measured
from diagnostics.agent.evidence.analyzers.logs import DB_WORDS, log_subject
from diagnostics.agent.evidence.analyzers.metrics.baselines import risen, shown
from diagnostics.agent.findings import Finding, Severity
from diagnostics.agent.request.timewindow import iso, line_time

_DURATION = rx.compile(
    r"(?P<what>[A-Za-z][\w .'/=-]{2,60}?)\s+"
    r"(?:completed|finished|took|done|rendered|executed|responded|processed)"
    r"\s+(?:in\s+|after\s+)?(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|milliseconds?|s|secs?|seconds?)\b",
    rx.IGNORECASE,
)
# What precedes the operation's name on a line: a timestamp, a level, a logger ('2026-01-05T10:00:00Z INFO
# app: ', 'INFO:app:').
_LEAD = rx.compile(
    r"^\s*(?:\S*\d\S*\s+)*"
    r"(?:\[?(?:INFO|DEBUG|WARN\w*|ERROR|NOTICE|TRACE)\]?[:\s]+(?:[\w.-]+:\s*)?|[\w.-]+:\s+)?"
)
_JSON_DURATION = rx.compile(
    r"\"(?:responseTime|response_time|duration_ms|latency_ms|elapsed_ms)\"\s*:\s*(\d+(?:\.\d+)?)"
)
_EXCEPTION = rx.compile(
    r"(?:Exception in thread \"[^\"]+\"\s+|^|\s)((?:[a-z_][\w$]*\.)+[A-Z]\w*(?:Exception|Error)|"
    r"[A-Z]\w*(?:Exception|Error))(?::\s*(.{0,120}))?$",
    rx.MULTILINE,
)
_PANIC = rx.compile(r"^(?:panic|fatal error|FATAL|CRITICAL)[:\s]+(.{0,160})$", rx.MULTILINE)
_HTTP_STATUS = rx.compile(r"\"\s(\d{3})\s|\"statusCode\":\s*(\d{3})|\bstatus[=:]\s*(\d{3})\b")
# A line the service itself flags as slow (its own threshold, e.g. 'slow request GET /x took 151 ms').
_SLOW_LINE = rx.compile(
    r"\bslow (request|query|call|operation)\b[^\n]*?\btook\s+(\d+(?:\.\d+)?)\s*(ms|s)\b", rx.IGNORECASE
)
_RECURSION = " — the stack trace repeats the same frames: unbounded recursive calls exhausted the stack"
_FRAME = rx.compile(r"^\s*(?:\\t)?at\s+([\w.$<>]+)\(", rx.MULTILINE)


# How many requests a log shows: access lines ('"GET /x HTTP/1.1" 200'), or the counts of periodic
# summaries a service logs ('last 10s: 38 requests, 0 errors (5xx), p50 4 ms').
_ACCESS = rx.compile(r"\b(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) \S+ HTTP/[\d.]+\"?\s+\d{3}\b")
_COUNTED = rx.compile(r"\b(\d+) requests?\b")
SLOW_SHARE = 0.1  # slow lines as a share of the log's requests that make a latency problem
# A periodic latency summary's quantile: 'p50 156 ms', 'p95=0.4s', 'median 12ms'.
_LOGGED_QUANTILE = rx.compile(r"\b(p\d{2}|median)[ =:]+(\d+(?:\.\d+)?)\s*(ms|s)\b", rx.IGNORECASE)


def _requests(text: str) -> int:
    access = len(_ACCESS.findall(text))
    counted = sum(
        int(n) for line in text.splitlines() if _LOGGED_QUANTILE.search(line) for n in _COUNTED.findall(line)
    )
    return max(access, counted)


def _seconds(value: str, unit: str) -> float:
    number = float(value)
    return number / 1000 if unit.lower().startswith("m") else number


def _latency_threshold_s() -> float:
    return diagnostics_conf.get().analyzers.latency_s


@register
class LogSignalAnalyzer(Analyzer):
    name = "log_signals"

    def applies(self, out: ToolOutput) -> bool:
        return out.is_log and bool(out.text.strip())

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        source, subject, where = log_subject(out, state)
        text = out.text
        durations = self._durations(text, subject, source)
        _record_slow(text, subject, state)
        return (
            (durations or self._flagged_slow(text, subject, source))
            + _logged_rise(text, subject, source)
            + self._exceptions(text, subject, where)
            + self._http_errors(text, subject, source)
        )

    def _durations(self, text: str, subject: str, source: str) -> list[Finding]:
        threshold = _latency_threshold_s()
        groups: dict[str, list[float]] = defaultdict(list)
        samples: dict[str, str] = {}
        # Only a request served is latency: a job's, step's or batch's own run time ('batch 4471 done in
        # 29s') is work done, and a line that says neither is not evidence of latency (durations.measured).
        for line in text.splitlines():
            match = _DURATION.search(line)
            json_value = _JSON_DURATION.search(line)
            if not (match or json_value) or measured(line) != SERVED:
                continue
            if json_value:
                groups["request"].append(float(json_value.group(1)) / 1000)
                continue
            what = _LEAD.sub("", line[: match.start()] + match.group("what")).strip()
            what = what.strip(" :.-") or "operation"
            key = rx.sub(r"\d+", "N", what)  # 'batch 4471' and 'batch 4473' are one operation
            groups[key].append(_seconds(match.group("value"), match.group("unit")))
            samples.setdefault(key, _LEAD.sub("", line[: match.end()]).strip())
        findings = []
        for what, values in groups.items():
            slow = [v for v in values if v >= threshold]
            if not slow or len(slow) < max(1, len(values) // 5):
                continue
            is_db = bool(DB_WORDS.search(what))
            low, high = min(slow), max(slow)
            span = f"between {low:.2f} and {high:.2f} seconds" if high - low > 0.05 else f"{high:.2f} seconds"
            if is_db:
                summary = (
                    f"Slow database calls cause high latency in {source or 'the service'}: database "
                    "operations "
                    f"('{clip(samples.get(what, what), 80)}') take {span} to complete ({len(slow)} of "
                    f"{len(values)} over {threshold:g} s)."
                )
            elif what == "request":
                summary = (
                    f"High latency in {source or 'the service'}: requests take {span} ({len(slow)} of "
                    f"{len(values)} over {threshold:g} s)."
                )
            else:
                summary = (
                    f"High latency in {source or 'the service'}: operations like "
                    f"'{clip(samples.get(what, what), 80)}' take {span} ({len(slow)} of {len(values)} over "
                    f"{threshold:g} s)."
                )
            findings.append(
                Finding(
                    "slow_database" if is_db else "high_latency",
                    summary,
                    Severity.WARNING,
                    subject,
                    clip(samples.get(what, "")),
                    82 if is_db else 45,
                    "Find what makes the database calls slow (query plan, locks, database load)."
                    if is_db
                    else "",
                )
            )
        return findings

    def _flagged_slow(self, text: str, subject: str, source: str) -> list[Finding]:
        """Operations the service logs as slow by its own threshold (under the global one): a steady
        stream of them (3 or more), or, where the log counts its requests (access lines, periodic 'N
        requests' summaries), 2 or more that are a tenth of its requests or more."""
        matches = list(_SLOW_LINE.finditer(text))
        requests = _requests(text)
        share = f" of {requests} requests" if requests else ""
        if len(matches) < 2 or (
            len(matches) < 3 and not (requests and len(matches) >= SLOW_SHARE * requests)
        ):
            return []  # one slow request is noise; a steady stream, or a share of the requests, is not
        values = [_seconds(m.group(2), m.group(3)) for m in matches]
        what = matches[-1].group(1).lower()
        return [
            Finding(
                "high_latency",
                f"High latency in {source or 'the service'}: it logs {len(matches)} slow {what}s{share} "
                f"(up to {max(values) * 1000:.0f} ms, e.g. '{clip(matches[-1].group(0), 80)}').",
                Severity.WARNING,
                subject,
                clip(matches[-1].group(0)),
                58,
                f"Find what makes {source or 'the service'} slow (a dependency, a cache, a recent change).",
            )
        ]

    def _exceptions(self, text: str, subject: str, where: str) -> list[Finding]:
        findings = []
        seen: set[str] = set()
        for match in _EXCEPTION.finditer(text):
            name = match.group(1)
            short = name.rsplit(".", 1)[-1]
            if short in seen or short in ("Error", "Exception") or len(seen) >= 2:
                continue
            seen.add(short)
            frames = _FRAME.findall(text)
            repeated = len(frames) - len(set(frames)) if frames else 0
            detail = ""
            if short == "StackOverflowError" or repeated >= 5:
                detail = _RECURSION
            elif "OutOfMemory" in short or short == "MemoryError":
                detail = " — the application ran out of memory"
            message = f": {clip(match.group(2), 80)}" if match.group(2) else ""
            findings.append(
                Finding(
                    "exception",
                    f"The application crashes with {name}{message}{where}{detail}.",
                    Severity.CRITICAL,
                    subject,
                    clip(match.group(0)),
                    70 if detail else 50,
                )
            )
        if not findings:
            for match in _PANIC.finditer(text):
                findings.append(
                    Finding(
                        "fatal_error",
                        f"Fatal error{where}: {clip(match.group(1), 160)}.",
                        Severity.CRITICAL,
                        subject,
                        clip(match.group(0)),
                        45,
                    )
                )
                break
        return findings

    def _http_errors(self, text: str, subject: str, source: str) -> list[Finding]:
        codes = [int(a or b or c) for a, b, c in _HTTP_STATUS.findall(text)]
        if len(codes) < 10:
            return []
        errors = [c for c in codes if c >= 500]
        ratio = len(errors) / len(codes)
        threshold = diagnostics_conf.get().analyzers.error_rate
        if ratio < threshold:
            return []
        return [
            Finding(
                "error_rate",
                f"Error-rate spike in {source or 'the service'}: {len(errors)} of {len(codes)} requests "
                f"({ratio:.0%}) answered with HTTP 5xx.",
                Severity.CRITICAL,
                subject,
                f"{len(errors)}/{len(codes)} 5xx",
                65,
            )
        ]


def _logged_rise(text: str, subject: str, source: str) -> list[Finding]:
    """A latency quantile the service logs periodically ('last 10s: ... p50 156 ms') risen well above its
    own earlier level in the same log (``risen``), with when it started."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    last: dict[str, str] = {}
    for line in text.splitlines():
        moment = line_time(line) if _LOGGED_QUANTILE.search(line) else None
        if moment is None:
            continue
        for label, value, unit in _LOGGED_QUANTILE.findall(line):
            series[label.lower()].append((moment.timestamp(), _seconds(value, unit)))
            last[label.lower()] = line.strip()
    for label, points in series.items():
        rise = risen(points)
        if rise is None:
            continue
        started = iso(datetime.fromtimestamp(rise.started, UTC))
        ratio = f" ({rise.level / rise.baseline:.0f}x)" if rise.baseline > 0 else ""
        return [
            Finding(
                "high_latency",
                f"High latency in {source or 'the service'}: the {label} latency it logs rose from "
                f"{shown(rise.baseline)} to {shown(rise.level)}{ratio} from {started} (now "
                f"{shown(points[-1][1])}: '{clip(last[label], 100)}').",
                Severity.WARNING,
                subject,
                clip(last[label]),
                60,
                f"Find what changed in {source or 'the service'} at {started} (a deploy, a config change, a "
                "slower dependency).",
            )
        ]
    return []


_PID = rx.compile(r"\b[\w.-]+\[(\d+)\]")


def _record_slow(text: str, subject: str, state: AnalysisState) -> None:
    """The slow lines of the process that logs now (the pid of the last one, when lines carry one), for
    ``metrics.correlation.slow_share``: a request counter counts since that process started."""
    lines = [(line, pid.group(1) if (pid := _PID.search(line)) else "") for line in text.splitlines()]
    slow = [(line, pid) for line, pid in lines if _SLOW_LINE.search(line)]
    if not slow or not subject:
        return
    own = [line for line, pid in slow if pid == slow[-1][1]]
    state.fact_dict("slow_lines")[subject] = (len(own), clip(own[-1].strip(), 100))
