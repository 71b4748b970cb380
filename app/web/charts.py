"""Server-side SVG charts: geometry computed here, drawn by templates/web/partials/chart.html.

No JavaScript and no chart library: a chart is a viewBox, axes with ticks, and polylines, points
or bars; labels are rendered by the template (and so escaped by it). Time buckets are drawn as bars,
so a new install's one day of data reads as a column, not a lone dot at the edge of the chart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 26, 34  # TOP leaves the y-axis title its own line
BAR_FILL = 0.8  # share of an x slot its bars take (the rest separates slots)
MIN_BAR = 1.5  # px: a zero is a sliver on the axis, a gap (None) is nothing
COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c"]


@dataclass
class Tick:
    pos: float
    label: str


@dataclass
class Bar:
    x: float  # left edge, chart coordinates
    y: float  # top edge
    width: float
    height: float


@dataclass
class Series:
    name: str
    color: str
    points: list[tuple[float, float]]  # chart coordinates
    dashed: bool = False
    bars: list[Bar] = field(default_factory=list)

    @property
    def polyline(self) -> str:
        return " ".join(f"{x:.1f},{y:.1f}" for x, y in self.points)


@dataclass
class Marker:
    x: float
    y: float
    label: str
    color: str = "#111827"
    anchor: str = "start"  # the label sits right of the marker ("end": left of it, near the right edge)


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    markers: list[Marker] = field(default_factory=list)
    lines: bool = True
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM

    @property
    def empty(self) -> bool:
        return not any(s.points or s.bars for s in self.series)


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 5 times a power of ten apart)."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 0.5:
        ticks.append(round(value, 12))
        value += step
    return ticks


def distinct_labels(values: Sequence[float], fmt: Callable[[float], str]) -> list[tuple[float, str]]:
    """Ticks whose labels differ: where the format is coarser than the step (99.5% and 99.6% both
    print "100%"), every other tick is dropped until no label repeats, so an axis never shows the same
    number at two heights. Each kept tick stays at its true position."""
    ticks = list(values)
    while len(ticks) > 1:
        labels = [fmt(v) for v in ticks]
        if len(set(labels)) == len(labels):
            return list(zip(ticks, labels, strict=True))
        ticks = ticks[::2] if len(ticks) > 2 else ticks[:1]
    return [(v, fmt(v)) for v in ticks]


def line_chart(
    *,
    title: str,
    x_values: Sequence[float],
    series: Sequence[tuple[str, Sequence[float | None]]],
    x_label: str = "",
    y_label: str = "",
    x_format: Callable[[float], str] = lambda v: f"{v:g}",
    y_format: Callable[[float], str] = lambda v: f"{v:g}",
    y_min: float | None = None,
    y_max: float | None = None,
    x_tick_count: int = 6,
    x_nice_ticks: bool = False,
    lines: bool = True,
    markers: Sequence[tuple[float, float, str]] = (),
    dashed: Sequence[str] = (),
    bars: bool = False,
) -> Chart:
    """Series share the x values; a None value is a gap (the point is left out).

    x ticks sit on the data's x values (evenly spaced data, e.g. time buckets), or with ``x_nice_ticks``
    on round values (clustered data, e.g. a cost-quality curve, whose labels would overlap).
    With ``bars`` each x value is a slot of the chart's width holding one bar per series, side by side
    (evenly spaced data only); a zero still shows as a sliver, so it differs from a gap.
    """
    chart = Chart(title, x_label, y_label, [], [], [], lines=lines and not bars)
    values = [v for _, ys in series for v in ys if v is not None] + [m[1] for m in markers]
    xs = list(x_values) + [m[0] for m in markers]
    if not values or not xs:
        chart.series = [Series(name, COLORS[i % len(COLORS)], []) for i, (name, _) in enumerate(series)]
        return chart
    y_ticks = nice_ticks(min(values) if y_min is None else y_min, max(values) if y_max is None else y_max)
    low_y, high_y = y_ticks[0], y_ticks[-1]
    low_x, high_x = min(xs), max(xs)
    slot = min((b - a for a, b in zip(sorted(set(xs)), sorted(set(xs))[1:], strict=False)), default=1.0)
    if bars:  # each x value is the middle of its slot
        low_x, high_x = low_x - slot / 2, high_x + slot / 2
    if high_x == low_x:
        low_x, high_x = low_x - 1, high_x + 1

    def px(x: float) -> float:
        return chart.left + (x - low_x) / (high_x - low_x) * (chart.right - chart.left)

    def py(y: float) -> float:
        return chart.bottom - (y - low_y) / (high_y - low_y or 1) * (chart.bottom - chart.top)

    slot_px = slot / (high_x - low_x) * (chart.right - chart.left)
    bar_px = slot_px * BAR_FILL / max(1, len(series))
    for i, (name, ys) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        if bars:
            left = -slot_px * BAR_FILL / 2 + i * bar_px
            baseline = py(min(max(low_y, 0.0), high_y))
            columns = [
                _bar(px(x) + left, bar_px, py(y), baseline)
                for x, y in zip(x_values, ys, strict=True)
                if y is not None
            ]
            chart.series.append(Series(name, color, [], dashed=name in dashed, bars=columns))
            continue
        points = [(px(x), py(y)) for x, y in zip(x_values, ys, strict=True) if y is not None]
        chart.series.append(Series(name, color, points, dashed=name in dashed))
    chart.y_ticks = [Tick(py(v), label) for v, label in distinct_labels(y_ticks, y_format)]
    if x_nice_ticks:
        tick_xs = [x for x in nice_ticks(low_x, high_x, x_tick_count) if low_x <= x <= high_x]
    else:
        every = max(1, math.ceil(len(x_values) / x_tick_count))
        tick_xs = sorted(set(x_values))[::every] if x_values else [low_x, high_x]
    chart.x_ticks = [Tick(px(x), label) for x, label in distinct_labels(tick_xs, x_format)]
    middle = (chart.left + chart.right) / 2
    chart.markers = [
        Marker(px(x), py(y), label, anchor="start" if px(x) < middle else "end") for x, y, label in markers
    ]
    return chart


def _bar(x: float, width: float, y: float, baseline: float) -> Bar:
    """A bar from the baseline to y (above it, or below for a negative value), never thinner than MIN_BAR."""
    top, height = min(y, baseline), abs(baseline - y)
    if height < MIN_BAR:
        top, height = baseline - MIN_BAR, MIN_BAR
    return Bar(x, top, width, height)
