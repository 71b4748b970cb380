"""A Prometheus query's result as series with their times: the HTTP API's JSON (``/api/v1/query`` and
``/api/v1/query_range``: a vector, a matrix or a scalar; the whole body or only its ``data``) and the
prometheus toolset's rendering of it (``name{a="b"} => 4.7 @ <time>``; a matrix as ``N points <from> ..
<to>; min=.. max=.. last=..`` and a line of sampled points). ``samples.parse_samples`` keeps one value a
series; the answers that give a number with its time, and the trend of a range, read these.

A recording may merge the results of several queries into one vector, each series marked with its own
``"query"``: that is kept (``Series.query``), so a reader takes the series of the query it sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from diagnostics.agent import rx
from routing.json_body import loads_answer

_LABELS = r'\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\}'
_LABEL = rx.compile(r"([A-Za-z_]\w*)=\"((?:[^\"\\]|\\.)*)\"")
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|NaN|Inf)"
_STAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"
_VECTOR = rx.compile(r"^([a-zA-Z_:][\w:]*)?(" + _LABELS + r") => (" + _NUMBER + r") @ (" + _STAMP + r")")
_MATRIX = rx.compile(
    r"^([a-zA-Z_:][\w:]*)?(" + _LABELS + r"): (\d+) points (" + _STAMP + r") \.\. (" + _STAMP + r"); "
    r"min=(" + _NUMBER + r") max=(" + _NUMBER + r") last=(" + _NUMBER + r")"
)
_SAMPLED = rx.compile(r"^\s+\d{2}:\d{2}:\d{2}=(" + _NUMBER + r")")
_SCALAR = rx.compile(r"^scalar: (" + _NUMBER + r") @ (" + _STAMP + r")")


@dataclass
class Series:
    """One series of a result: its labels (``__name__`` among them when the query kept it), its points
    (Unix seconds, value) oldest first, the extremes of the range (a rendered matrix shows only some of
    its points) and the query it answers when the recording says."""

    labels: dict[str, str]
    points: list[tuple[float, float]]
    low: float | None = None
    high: float | None = None
    query: str = ""
    count: int = 0

    @property
    def name(self) -> str:
        return self.labels.get("__name__", "")

    @property
    def value(self) -> float:
        return self.points[-1][1]

    @property
    def at(self) -> float:
        return self.points[-1][0]

    @property
    def is_range(self) -> bool:
        return len(self.points) >= 2

    def minimum(self) -> float:
        return self.low if self.low is not None else min(v for _, v in self.points)

    def maximum(self) -> float:
        return self.high if self.high is not None else max(v for _, v in self.points)


@dataclass
class Result:
    kind: str = ""  # vector, matrix, scalar ("" when the text holds no result)
    series: list[Series] = field(default_factory=list)


def _number(text: object) -> float | None:
    try:
        value = float(str(text))
    except ValueError:
        return None
    return value if value == value else None  # NaN is no value


def _labels(text: str) -> dict[str, str]:
    return {k: v.replace('\\"', '"') for k, v in _LABEL.findall(text)}


def _named(name: str | None, labels: str) -> dict[str, str]:
    return {**_labels(labels), **({"__name__": name} if name else {})}


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _from_json(text: str) -> Result | None:
    start = text.find("{")
    if start == -1:
        return None
    try:
        document = loads_answer(text[start:])
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    data = document.get("data", document)
    if not isinstance(data, dict) or "resultType" not in data:
        return None
    kind, raw = str(data.get("resultType")), data.get("result")
    if kind in ("scalar", "string"):
        value = _number(raw[1]) if isinstance(raw, list) and len(raw) == 2 else None
        stamp = _number(raw[0]) if isinstance(raw, list) and len(raw) == 2 else None
        series = [Series({}, [(stamp, value)])] if value is not None and stamp is not None else []
        return Result("scalar", series)
    series = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        metric = item.get("metric")
        metric = metric if isinstance(metric, dict) else {}
        pairs = item.get("values") if kind == "matrix" else [item.get("value")]
        points = []
        for pair in pairs if isinstance(pairs, list) else []:
            if isinstance(pair, list) and len(pair) == 2:
                stamp, value = _number(pair[0]), _number(pair[1])
                if stamp is not None and value is not None:
                    points.append((stamp, value))
        if points:
            labels = {str(k): str(v) for k, v in metric.items()}
            series.append(Series(labels, points, query=str(item.get("query") or ""), count=len(points)))
    return Result(kind, series)


def _from_rendering(text: str) -> Result:
    kind, series = "", []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if match := _VECTOR.match(line):
            value = _number(match.group(3))
            if value is not None:
                labels = {
                    **_labels(match.group(2)),
                    **({"__name__": match.group(1)} if match.group(1) else {}),
                }
                series.append(Series(labels, [(_epoch(match.group(4)), value)], count=1))
            kind = "vector"
        elif match := _MATRIX.match(line):
            kind = "matrix"
            last = _number(match.group(8))
            if last is None:
                continue
            sampled = _SAMPLED.match(lines[i + 1]) if i + 1 < len(lines) else None
            first = _number(sampled.group(1)) if sampled else None
            start, end = _epoch(match.group(4)), _epoch(match.group(5))
            points = ([(start, first)] if first is not None and end > start else []) + [(end, last)]
            labels = _named(match.group(1), match.group(2))
            series.append(
                Series(
                    labels,
                    points,
                    low=_number(match.group(6)),
                    high=_number(match.group(7)),
                    count=int(match.group(3)),
                )
            )
        elif match := _SCALAR.match(line):
            value = _number(match.group(1))
            if value is not None:
                series.append(Series({}, [(_epoch(match.group(2)), value)], count=1))
            kind = "scalar"
        elif line.startswith("no data: the query returned an empty "):
            kind = line.rsplit(" ", 1)[-1]
    return Result(kind, series)


def parse_result(text: str) -> Result:
    """The result in a query tool's output, in either shape; ``Result()`` when the text holds none."""
    rendered = _from_rendering(text)
    if rendered.kind:
        return rendered
    return _from_json(text) or Result()


def slope(series: Series) -> float | None:
    """Change per second over a range: the least-squares slope of its points (what PromQL's ``deriv``
    computes); None for a single point."""
    if len(series.points) < 2:
        return None
    n = len(series.points)
    mean_t = sum(t for t, _ in series.points) / n
    mean_v = sum(v for _, v in series.points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in series.points)
    if spread == 0:
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in series.points) / spread


def number(value: float) -> str:
    """A value as people read it: 4.7, 0.0421, 1250, 3.2e+09 never (large values are whole numbers)."""
    if value != value:
        return "NaN"
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}".replace(",", "")
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.3g}"


def size(value: float) -> str:
    """Bytes in Kubernetes' binary units: 3.5Gi, 512Mi, 20Ki, 900B."""
    magnitude = abs(value)
    for unit, scale in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if magnitude >= scale:
            return f"{value / scale:.1f}{unit}".replace(".0" + unit, unit)
    return f"{value:.0f}B"


def duration(seconds: float) -> str:
    """A duration in its largest sensible unit: 3.2 days, 1 day, 5.5 hours, 12 minutes, 40 seconds."""
    for unit, scale in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= 2 * scale or (seconds >= scale and (unit == "minute" or seconds % scale == 0)):
            value = f"{seconds / scale:.1f}".removesuffix(".0")
            return f"{value} {unit}" + ("" if value == "1" else "s")
    return f"{seconds:.0f} seconds"


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
