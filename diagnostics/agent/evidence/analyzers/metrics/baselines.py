"""Latency against its own past and against the alert's objective: a latency series (a quantile of a
Prometheus histogram or summary, a mean from ``_sum``/``_count``) read over a range whose recent level is
well above its own earlier baseline, or above the latency objective the alert's expression states
(``histogram_quantile(0.99, ...) > 0.25``, or 'latency above 300 ms' in its text), is a finding on its
own, with when it started: the first point from which it stayed up.

``risen`` judges any timed series of durations (also the periodic 'p50 156 ms' summaries a service logs):
the baseline is the median of the earlier half, the level the median of the last quarter; risen means at
least ``RISE`` times the baseline and at least ``FLOOR_S`` more (a 2 ms -> 5 ms change is noise)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.evidence.analyzers.metrics.results import Series, parse_result, stamp
from diagnostics.agent.evidence.analyzers.metrics.samples import LATENCY_NAME
from diagnostics.agent.findings import Finding, Severity

RISE = 3.0  # times the earlier baseline
FLOOR_S = 0.05  # and at least this much more, in seconds
MIN_POINTS = 4

# An objective in an alert: a PromQL comparison on a latency expression, or prose ('latency above 300ms').
_OBJECTIVE_EXPR = rx.compile(
    r"(?i)(?:histogram_quantile|latency|duration|_seconds)[^\n]*?>=?\s*([\d.]+(?:e-?\d+)?)\s*(ms)?\b"
)
_OBJECTIVE_PROSE = rx.compile(
    r"(?i)\b(?:latency|response time|p\d{2})\b[^\n.]{0,40}?\b(?:above|over|exceeds?|greater than|>)\s*"
    r"([\d.]+)\s*(ms|milliseconds?|s|seconds?)\b"
)
_RANGED = rx.compile(r"([a-zA-Z_:][\w:]*)\s*(?:\{[^}]*\})?\s*\[")
_COUNTS = rx.compile(r"_count$|_bucket$|_total$")
_IN_MS = rx.compile(r"(?:_ms|_milliseconds)(?:_bucket|_sum|_count)?\b")


@dataclass(frozen=True)
class Rise:
    baseline: float
    level: float
    started: float  # the time of the first point from which it stayed above the midpoint


def risen(points: list[tuple[float, float]], floor: float = FLOOR_S) -> Rise | None:
    """The rise of a timed series of durations (seconds) above its own earlier baseline, or None."""
    if len(points) < MIN_POINTS:
        return None
    values = [v for _, v in points]
    baseline = statistics.median(values[: len(values) // 2])
    level = statistics.median(values[-max(1, len(values) // 4) :])
    if level < RISE * baseline or level - baseline < floor:
        return None
    middle = (baseline + level) / 2
    start = len(points) - 1
    while start > 0 and points[start - 1][1] >= middle:
        start -= 1
    return Rise(baseline, level, points[start][0])


def objective_s(state: AnalysisState) -> float | None:
    """The latency objective (seconds) the alert's expressions or text state, or None."""
    texts = [*state.alert.queries, state.alert.text]
    for text in texts:
        for pattern in (_OBJECTIVE_EXPR, _OBJECTIVE_PROSE):
            match = pattern.search(text)
            if match is None:
                continue
            value = float(match.group(1))
            unit = (match.group(2) or "").lower()
            in_ms = unit.startswith("m") or (pattern is _OBJECTIVE_EXPR and bool(_IN_MS.search(text)))
            return value / 1000 if in_ms else value
    return None


def shown(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _what(series: Series, query: str) -> tuple[str, str]:
    """(what the series measures, whose it is) from its labels and the query."""
    labels = series.labels
    target = next(
        (labels[k] for k in ("service", "job", "pod", "container", "deployment", "app") if labels.get(k)), ""
    )
    quantile = rx.search(r"histogram_quantile\(\s*([\d.]+)", query)
    q = labels.get("quantile") or (quantile.group(1) if quantile else "")
    inner = _RANGED.search(query)
    name = series.name or (inner.group(1).removesuffix("_bucket") if inner else "")
    what = f"p{float(q) * 100:g} " if q else ""
    return f"{what}{name or 'latency'}", target


@register
class LatencyBaselineAnalyzer(Analyzer):
    """A latency series over a range: risen above its own baseline, or above the alert's objective."""

    name = "latency_baseline"

    def applies(self, out: ToolOutput) -> bool:
        return out.ok and not out.no_data and ("points" in out.text or '"matrix"' in out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        query = str(out.params.get("query") or "")
        result = parse_result(out.text)
        objective = objective_s(state)
        default = str(out.params.get("service") or out.params.get("name") or "")
        findings = []
        for series in result.series:
            about = f"{series.name} {series.query or query}"
            if not series.is_range or not LATENCY_NAME.search(about) or _COUNTS.search(series.name):
                continue
            scale = 1 / 1000 if _IN_MS.search(about) else 1.0
            points = [(t, v * scale) for t, v in series.points]
            what, target = _what(series, series.query or query)
            target = target or default
            rise = risen(points)
            over = objective is not None and points[-1][1] >= objective
            if rise is None and not over:
                continue
            parts = []
            if rise is not None:
                parts.append(
                    f"rose from {shown(rise.baseline)} to {shown(rise.level)} "
                    f"({rise.level / rise.baseline:.0f}x its own earlier level) from {stamp(rise.started)}"
                    if rise.baseline > 0
                    else f"rose to {shown(rise.level)} from {stamp(rise.started)}"
                )
            if over and objective is not None:
                first = next(t for t, v in points if v >= objective) if rise is None else None
                since = f" since {stamp(first)}" if first is not None else ""
                parts.append(f"is over the alert's objective of {shown(objective)}{since}")
            findings.append(
                Finding(
                    "high_latency",
                    f"High latency in {target or 'the service'}: {what} {' and '.join(parts)} (now "
                    f"{shown(points[-1][1])}).",
                    Severity.WARNING,
                    target,
                    f"{what}={points[-1][1]:g}s",
                    60,
                    f"Find what changed in {target or 'the service'} when it started (a deploy, a config "
                    "change, a slower dependency).",
                    at=stamp(series.at),
                )
            )
        return findings[:3]
