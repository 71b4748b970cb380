"""How fast a predicted metric moves, and when it gets there: the follow-up reads of a ``predict_linear``
alert (``deriv(M[W])`` at one time, or M over a range) -> the rate per day and the time it reaches zero.

``predict_linear(M[W], H) < 0`` says only that, at the rate of the last W, M crosses zero within H. The
rate itself (``deriv``, or the least-squares slope of the range's points), with M's value now, says how
much it moves a day and when it crosses: a volume's free bytes (kubelet's ``*_available_bytes``, node
exporter's ``*_avail_bytes``/``*_free_bytes``) falling, or its used bytes rising towards its capacity.
The object is named by its labels (a PVC, a filesystem's mount point on an instance).
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.evidence.analyzers.metrics.results import (
    Result,
    Series,
    duration,
    number,
    parse_result,
    size,
    slope,
    stamp,
)
from diagnostics.agent.findings import Finding, Severity

_DERIV = rx.compile(r"^\s*deriv\(\s*([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?\s*\[(\d+[smhdw])\]\s*\)\s*$")
_SELECTOR = rx.compile(r"^\s*([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?\s*$")
_PREDICTED = rx.compile(r"predict_linear\(\s*([a-zA-Z_:][\w:]*)[^\[]*\[(\d+[smhdw])\]\s*,\s*([\d\s*.]+)\)")
_FREE = rx.compile(r"(?:avail|available|free)(?:_bytes)?$")
_AMOUNT = r"(?:avail|available|free|used)_bytes$"
_IDENTITY = ("namespace", "persistentvolumeclaim", "pod", "instance", "node", "mountpoint", "device")
DAY = 86400


def _product(expr: str) -> float | None:
    """``4 * 24 * 3600`` -> 345600.0 (PromQL's scalar products)."""
    total = 1.0
    for factor in expr.split("*"):
        try:
            total *= float(factor)
        except ValueError:
            return None
    return total


def _predicted(state: AnalysisState) -> dict[str, tuple[str, float | None]]:
    """metric -> (window, horizon in seconds) of each predict_linear in the alert's expressions."""
    found: dict[str, tuple[str, float | None]] = {}
    for query in state.alert.queries:
        for match in _PREDICTED.finditer(query):
            found.setdefault(match.group(1), (match.group(2), _product(match.group(3))))
    return found


def _identity(series: Series) -> tuple[tuple[str, str], ...]:
    return tuple((k, series.labels[k]) for k in _IDENTITY if series.labels.get(k))


def _same_object(a: Series, b: Series) -> bool:
    mine, theirs = dict(_identity(a)), dict(_identity(b))
    shared = set(mine) & set(theirs)
    return bool(shared) and all(mine[k] == theirs[k] for k in shared)


def _latest(state: AnalysisState, metric: str, of: Series) -> Series | None:
    """The most recent value of ``metric`` for the object of ``of``, in any output read so far."""
    for out in reversed(state.outputs):
        if not out.ok or out.no_data or metric not in out.text:
            continue
        for series in parse_result(out.text).series:
            if series.name == metric and _same_object(series, of):
                return series
    return None


def _object(series: Series) -> str:
    labels = series.labels
    if labels.get("persistentvolumeclaim"):
        return f"the volume of PVC {labels['persistentvolumeclaim']}"
    if labels.get("mountpoint"):
        on = labels.get("instance") or labels.get("node") or ""
        return f"the filesystem {labels['mountpoint']}" + (f" on {on}" if on else "")
    shown = ", ".join(f"{k}={v}" for k, v in _identity(series))
    return f"{series.name or 'the series'} ({shown})" if shown else series.name or "the series"


def _subject(series: Series) -> str:
    labels = series.labels
    if labels.get("persistentvolumeclaim"):
        return (
            f"persistentvolumeclaim/{labels.get('namespace', '')}/{labels['persistentvolumeclaim']}".replace(
                "//", "/"
            )
        )
    return labels.get("instance") or labels.get("pod") or labels.get("node") or ""


def _capacity(state: AnalysisState, metric: str, of: Series) -> Series | None:
    """The capacity beside an amount: kubelet's ``*_capacity_bytes``, node exporter's ``*_size_bytes``."""
    if not rx.search(_AMOUNT, metric):
        return None
    for total in ("capacity_bytes", "size_bytes"):
        found = _latest(state, rx.sub(_AMOUNT, total, metric), of)
        if found is not None:
            return found
    return None


def _writes_to(series: Series) -> str:
    claim = series.labels.get("persistentvolumeclaim")
    return f"PVC {claim}" if claim else _object(series)


@register
class TrendAnalyzer(Analyzer):
    """The rate of a metric an alert predicts, and when it reaches zero (or its capacity)."""

    name = "metric_trend"

    def applies(self, out: ToolOutput) -> bool:
        query = str(out.params.get("query") or "")
        return out.ok and not out.no_data and bool(_DERIV.match(query) or _SELECTOR.match(query))

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        predicted = _predicted(state)
        query = str(out.params.get("query") or "")
        deriv = _DERIV.match(query)
        matched = deriv or _SELECTOR.match(query)
        metric = str(matched.group(1)) if matched else ""
        if metric not in predicted:
            return []
        result = parse_result(out.text)
        findings = []
        for series, per_second in self._rates(result, metric, bool(deriv)):
            now = series if series.name == metric and not deriv else _latest(state, metric, series)
            finding = self._finding(state, metric, predicted[metric], series, per_second, now)
            if finding is not None:
                findings.append(finding)
        return findings

    @staticmethod
    def _rates(result: Result, metric: str, deriv: bool) -> list[tuple[Series, float]]:
        """(series, change per second): a deriv's value, or the slope of a range of the metric."""
        rates = []
        for series in result.series:
            if series.query and (metric not in series.query or series.query.startswith("deriv(") != deriv):
                continue  # a merged recording: another query's series
            if deriv and not series.name:
                rates.append((series, series.value))
            elif not deriv and series.name in (metric, "") and (change := slope(series)) is not None:
                rates.append((series, change))
        return rates

    @staticmethod
    def _finding(
        state: AnalysisState,
        metric: str,
        prediction: tuple[str, float | None],
        series: Series,
        per_second: float,
        now: Series | None,
    ) -> Finding | None:
        window, horizon = prediction
        free = bool(_FREE.search(metric))
        per_day = per_second * DAY
        grows = -per_day if free else per_day
        amount = size if metric.endswith("_bytes") else number
        what = _object(series)
        capacity = _capacity(state, metric, series)
        if grows <= 0:
            return Finding(
                "metric_trend",
                f"{what[:1].upper()}{what[1:]} is not filling at the rate of the last {window}: its "
                f"{metric} changes {amount(per_day)} a day.",
                Severity.INFO,
                _subject(series),
                f"{metric} change {per_second:g}/s",
                20,
            )
        parts = [f"{what[:1].upper()}{what[1:]}"]
        left = None
        if now is not None:
            left = now.value if free else (capacity.value - now.value if capacity is not None else None)
            if capacity is not None and capacity.value > 0:
                room = now.value if free else capacity.value - now.value
                total = amount(capacity.value)
                parts.append(f"has {room / capacity.value:.1%} free ({amount(room)} of {total})")
        parts.append(f"grows about {amount(grows)} a day (the rate of the last {window})")
        summary = " ".join(parts[:1]) + " " + " and ".join(parts[1:])
        if left is not None and left > 0:
            seconds = left / (grows / DAY)
            at = series.at if series.points else 0.0
            summary += f": at that rate it is full in about {duration(seconds)}, around {stamp(at + seconds)}"
        if horizon:
            summary += f"; predict_linear expects it to fill within {duration(horizon)}"
        return Finding(
            "volume_filling",
            summary + ".",
            Severity.WARNING,
            _subject(series),
            f"{'deriv' if series.name == '' else 'slope'} of {metric} over {window}: {per_second:g}/s",
            62,
            f"Find what writes to {_writes_to(series)} (retention, logs, a runaway job) or expand it.",
            at=stamp(series.at),
        )
