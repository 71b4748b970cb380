"""Metric samples from the three shapes a metrics tool returns (Prometheus exposition text, the query
API's JSON, the prometheus toolset's rendering), latency quantiles from raw histogram buckets, and the
endpoint a sample is about."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from diagnostics.agent import rx
from routing.json_body import loads_answer

# A label set; label values may hold braces (``route="/items/{id}"``).
_LABELS = r'\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\}'
_SAMPLE = rx.compile(
    r"^([a-zA-Z_:][\w:]*)(" + _LABELS + r")?\s+([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|NaN|\+Inf|-Inf))\s*$",
    rx.MULTILINE,
)
_LABEL = rx.compile(r"(\w+)=\"([^\"]*)\"")


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float

    @property
    def target(self) -> str:
        for key in ("pod", "container", "service", "job", "instance", "deployment", "app"):
            if self.labels.get(key):
                return self.labels[key]
        return ""


ENDPOINT_LABELS = ("route", "handler", "endpoint", "path", "uri", "url", "operation", "span_name", "method")
_QUANTILE = rx.compile(r"histogram_quantile\(\s*([\d.]+)")


def named_by_query(samples: list[Sample], query: str) -> list[Sample]:
    """Query results carry no metric name once PromQL aggregated them: name them after what the query
    computes (a latency quantile, a throttled ratio), so the analyzers below can read them."""
    lowered = query.lower()
    name = ""
    labels: dict[str, str] = {}
    if "throttled" in lowered:
        name = "container_cpu_cfs_throttled_ratio"
    elif "volume_stats_available_bytes" in lowered and "capacity_bytes" in lowered:
        name = "volume_available_ratio"
    elif rx.search(r"latency|duration", lowered):
        name = "request_duration_seconds"
        quantile = _QUANTILE.search(lowered)
        if quantile:
            labels["quantile"] = quantile.group(1)
    if not name:
        return samples
    return [Sample(name, {**labels, **s.labels}, s.value) if not s.name else s for s in samples]


LATENCY_NAME = rx.compile(r"latency|duration|requests?_seconds")


def histogram_quantiles(samples: list[Sample], q: float = 0.99) -> list[Sample]:
    """The ``q`` quantile of each latency histogram series in raw ``*_bucket`` samples (a /metrics
    scrape), computed as PromQL's histogram_quantile does: linear inside the bucket the rank falls in."""
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        if not s.name.endswith("_bucket") or "le" not in s.labels or not LATENCY_NAME.search(s.name):
            continue
        try:
            bound = float(s.labels["le"].replace("+Inf", "inf"))
        except ValueError:
            continue
        key = (s.name[: -len("_bucket")], tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")))
        series[key].append((bound, s.value))
    out = []
    for (name, labels), buckets in series.items():
        buckets.sort()
        total = buckets[-1][1] if buckets else 0.0
        if total <= 0 or buckets[-1][0] != float("inf"):
            continue
        rank, lower, below = q * total, 0.0, 0.0
        value = None
        for bound, count in buckets:
            if count >= rank:
                if bound == float("inf"):
                    value = lower
                else:
                    inside = count - below
                    value = lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
                break
            lower, below = bound, count
        if value is not None:
            out.append(Sample(name, {**dict(labels), "quantile": f"{q:g}"}, value))
    return out


def endpoint_of(sample: Sample) -> str:
    return next((sample.labels[k] for k in ENDPOINT_LABELS if sample.labels.get(k)), "")


def endpoint_label(sample: Sample) -> str:
    return next((k for k in ENDPOINT_LABELS if sample.labels.get(k)), "endpoint")


_BY = rx.compile(r"\bby\s*\(([^)]*)\)", rx.IGNORECASE)


def groups_by_endpoint(query: str) -> bool:
    """The query aggregates ``by (...)`` an endpoint label: each of its series is one endpoint."""
    return any(label.strip() in ENDPOINT_LABELS for group in _BY.findall(query) for label in group.split(","))


# The prometheus toolset's rendering: ``name{a="b"} => 0.42 @ <time>`` (a vector) and
# ``name{a="b"}: 12 points <from> .. <to>; min=.. max=.. last=..`` (a matrix; its max is taken).
_RENDERED_VECTOR = rx.compile(
    r"^([a-zA-Z_:][\w:]*)?(" + _LABELS + r") => ([-+]?[\d.eE+-]+|NaN|[+-]Inf) @ ", rx.MULTILINE
)
_RENDERED_MATRIX = rx.compile(
    r"^([a-zA-Z_:][\w:]*)?(" + _LABELS + r"): \d+ points .*?max=([-+]?[\d.eE+-]+|NaN)", rx.MULTILINE
)


def _rendered(text: str) -> list[Sample]:
    samples = []
    for pattern in (_RENDERED_VECTOR, _RENDERED_MATRIX):
        for m in pattern.finditer(text):
            try:
                value = float(m.group(3))
            except ValueError:
                continue
            if value == value:  # not NaN
                samples.append(Sample(m.group(1) or "", dict(_LABEL.findall(m.group(2))), value))
    return samples


def parse_samples(text: str) -> list[Sample]:
    rendered = _rendered(text)
    if rendered:
        return rendered
    samples = [
        Sample(m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3)))
        for m in _SAMPLE.finditer(text)
        if m.group(3) not in ("NaN",)
    ]
    if samples:
        return samples
    try:
        data = loads_answer(text)
    except ValueError:  # not JSON, or nested past the answer depth bound
        return []
    result = data.get("data", {}).get("result", []) if isinstance(data, dict) else []
    for series in result if isinstance(result, list) else []:
        metric = series.get("metric", {}) if isinstance(series, dict) else {}
        value = series.get("value") or (series.get("values") or [[0, "nan"]])[-1]
        try:
            number = float(value[1])
        except (TypeError, ValueError, IndexError):
            continue
        samples.append(
            Sample(str(metric.get("__name__", "")), {k: str(v) for k, v in metric.items()}, number)
        )
    return samples


def has_samples(text: str) -> bool:
    """The text holds metric samples in one of the shapes parse_samples reads."""
    return (
        bool(_SAMPLE.search(text))
        or '"resultType"' in text
        or bool(_RENDERED_VECTOR.search(text) or _RENDERED_MATRIX.search(text))
    )
