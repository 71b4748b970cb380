"""Metrics (Prometheus exposition text or query API JSON) -> CPU throttling, latency, error rate,
memory pressure."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings

from diagnostics.agent.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    register,
    register_correlator,
    service_of,
)
from diagnostics.agent.findings import Finding, Remedy, Severity
from routing.json_body import loads_answer

# A label set; label values may hold braces (``route="/items/{id}"``).
_LABELS = r'\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\}'
_SAMPLE = re.compile(
    r"^([a-zA-Z_:][\w:]*)(" + _LABELS + r")?\s+([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|NaN|\+Inf|-Inf))\s*$",
    re.MULTILINE,
)
_LABEL = re.compile(r"(\w+)=\"([^\"]*)\"")


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
_QUANTILE = re.compile(r"histogram_quantile\(\s*([\d.]+)")


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
    elif re.search(r"latency|duration", lowered):
        name = "request_duration_seconds"
        quantile = _QUANTILE.search(lowered)
        if quantile:
            labels["quantile"] = quantile.group(1)
    if not name:
        return samples
    return [Sample(name, {**labels, **s.labels}, s.value) if not s.name else s for s in samples]


VOLUME_FREE_MIN = 0.05  # a volume with less free space than this is full for practical purposes
LATENCY_NAME = re.compile(r"latency|duration|requests?_seconds")


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


_BY = re.compile(r"\bby\s*\(([^)]*)\)", re.IGNORECASE)


def groups_by_endpoint(query: str) -> bool:
    """The query aggregates ``by (...)`` an endpoint label: each of its series is one endpoint."""
    return any(label.strip() in ENDPOINT_LABELS for group in _BY.findall(query) for label in group.split(","))


# The prometheus toolset's rendering: ``name{a="b"} => 0.42 @ <time>`` (a vector) and
# ``name{a="b"}: 12 points <from> .. <to>; min=.. max=.. last=..`` (a matrix; its max is taken).
_RENDERED_VECTOR = re.compile(
    r"^([a-zA-Z_:][\w:]*)?(" + _LABELS + r") => ([-+]?[\d.eE+-]+|NaN|[+-]Inf) @ ", re.MULTILINE
)
_RENDERED_MATRIX = re.compile(
    r"^([a-zA-Z_:][\w:]*)?(" + _LABELS + r"): \d+ points .*?max=([-+]?[\d.eE+-]+|NaN)", re.MULTILINE
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


_COMPARISON = re.compile(r"(?:>|>=)\s*([\d.]+(?:e[-+]?\d+)?)\s*$", re.IGNORECASE)


def _bound(out: ToolOutput) -> float | None:
    """The threshold of a filtering query (``... > 0.1``, like an alert's expression): every series it
    returns is past it, so that is the bound the results are judged by."""
    match = _COMPARISON.search(str(out.params.get("query") or "").strip())
    return float(match.group(1)) if match else None


@register
class MetricsAnalyzer(Analyzer):
    name = "metrics"

    def applies(self, out: ToolOutput) -> bool:
        return (
            bool(_SAMPLE.search(out.text))
            or '"resultType"' in out.text
            or bool(_RENDERED_VECTOR.search(out.text) or _RENDERED_MATRIX.search(out.text))
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        samples = named_by_query(parse_samples(out.text), str(out.params.get("query") or ""))
        findings: list[Finding] = []
        findings += self._down(samples)
        findings += self._throttling(samples)
        default = str(out.params.get("service") or out.params.get("name") or "")
        query = str(out.params.get("query") or "")
        findings += self._latency(
            samples + histogram_quantiles(samples), default, _bound(out), groups_by_endpoint(query)
        )
        findings += self._errors(samples)
        findings += self._volumes(samples)
        return findings

    @staticmethod
    def _volumes(samples: list[Sample]) -> list[Finding]:
        """A volume's free share (available / capacity bytes) near zero: writes to it are about to fail."""
        findings = []
        for s in samples:
            if s.name != "volume_available_ratio" or s.value >= VOLUME_FREE_MIN:
                continue
            claim = s.labels.get("persistentvolumeclaim", "")
            where = f" in namespace {s.labels['namespace']}" if s.labels.get("namespace") else ""
            findings.append(
                Finding(
                    "volume_full",
                    f"The volume of PVC {claim or 'a claim'}{where} is almost full: only {s.value:.1%} of "
                    "its capacity is free, so writes to it fail or soon will.",
                    Severity.CRITICAL,
                    f"persistentvolumeclaim/{claim}" if claim else "",
                    f"available/capacity={s.value:g}",
                    78,
                    f"Free space on the volume or expand PVC {claim or 'the claim'} (its StorageClass must "
                    "allow volume expansion).",
                )
            )
        return findings

    @staticmethod
    def _down(samples: list[Sample]) -> list[Finding]:
        """``up`` == 0: Prometheus cannot scrape the target (the process is down or unreachable)."""
        findings = []
        for s in samples:
            if s.name == "up" and s.value == 0:
                where = s.labels.get("instance", "")
                who = s.labels.get("service") or s.labels.get("job") or where or "a target"
                findings.append(
                    Finding(
                        "target_down",
                        f"{who} is down: Prometheus cannot scrape it"
                        + (f" at {where}" if where else "")
                        + " (up == 0).",
                        Severity.CRITICAL,
                        who,
                        f"up{{instance={where!r}}}=0",
                        70,
                        remedy=Remedy(("restart", "start"), who, {}, f"restart {who}"),
                    )
                )
        return findings

    def _throttling(self, samples: list[Sample]) -> list[Finding]:
        threshold = float(settings.DIAGNOSTICS_THROTTLING_THRESHOLD)
        by_target: dict[str, dict[str, float]] = defaultdict(dict)
        for s in samples:
            if "throttled" in s.name or "cfs_periods" in s.name:
                by_target[s.target][s.name] = s.value
        findings = []
        for target, values in by_target.items():
            ratio = next((v for k, v in values.items() if "ratio" in k or "percent" in k), None)
            throttled = next((v for k, v in values.items() if "throttled_periods" in k), None)
            periods = next((v for k, v in values.items() if k.endswith("cfs_periods_total")), None)
            if ratio is None and throttled is not None and periods:
                ratio = throttled / periods
            if ratio is not None and ratio > 1:
                ratio /= 100
            if ratio is not None and ratio >= threshold:
                findings.append(
                    Finding(
                        "cpu_throttling",
                        f"CPU throttling: {target or 'the container'} is throttled in {ratio:.0%} of its "
                        "CPU periods (it hits its CPU limit).",
                        Severity.WARNING,
                        target,
                        f"throttled ratio {ratio:.2f}",
                        70,
                        "Raise the CPU limit or reduce CPU use (a busy loop or a CPU hog).",
                        Remedy(("increase_cpu_limit", "restart"), target, {}, "raise the CPU limit"),
                    )
                )
        for s in samples:
            if s.name.endswith(("cpu_usage_percent", "cpu_percent")) and s.value >= 90:
                findings.append(
                    Finding(
                        "cpu_saturation",
                        f"{s.target or 'A process'} uses {s.value:.0f}% CPU.",
                        Severity.WARNING,
                        s.target,
                        f"{s.name}={s.value}",
                        65,
                        remedy=Remedy(("restart",), s.target, {}, f"restart {s.target}"),
                    )
                )
        return findings

    def _latency(
        self,
        samples: list[Sample],
        default_target: str = "",
        bound: float | None = None,
        grouped_by: bool = False,
    ) -> list[Finding]:
        threshold = float(settings.DIAGNOSTICS_LATENCY_THRESHOLD_S)
        if bound is not None:
            threshold = min(threshold, bound)
        findings = []
        timings: list[tuple[Sample, float]] = []
        for s in samples:
            if not LATENCY_NAME.search(s.name) or s.name.endswith(("_count", "_bucket", "_sum")):
                continue
            quantile = s.labels.get("quantile")
            if quantile is not None and float(quantile) < 0.9:
                continue
            timings.append((s, s.value / 1000 if s.name.endswith(("_ms", "_milliseconds")) else s.value))
        fast = sorted({endpoint_of(s) for s, seconds in timings if seconds < threshold and endpoint_of(s)})
        slow = {endpoint_of(s) for s, seconds in timings if seconds >= threshold and endpoint_of(s)}
        for s, seconds in timings:
            if seconds < threshold:
                continue
            quantile = s.labels.get("quantile")
            q = f"p{float(quantile) * 100:g} " if quantile else ""
            endpoint = endpoint_of(s)
            where = f"the endpoint {endpoint} of " if endpoint else ""
            target = s.target or default_target
            others = f" The other endpoints are fast: {', '.join(fast[:5])}." if endpoint and fast else ""
            if endpoint and not fast and bound is not None and grouped_by and len(slow) == 1:
                # A filtering query grouped by the endpoint label (an alert's expression) returned this
                # series alone: every other series of that grouping is under the bound.
                label = endpoint_label(s)
                others = (
                    f" No other {label} is past {bound:g} s (the filtering query, by {label}, returned only "
                    f"this one): the other {label}s are fast."
                )
            findings.append(
                Finding(
                    "slow_endpoint" if endpoint else "high_latency",
                    f"High latency: {q}{s.name} of {where}{target or 'the service'} is {seconds:.2f} s "
                    f"(threshold {threshold:g} s)"
                    + (f"; {endpoint} is the slow endpoint." if endpoint else ".")
                    + others,
                    Severity.WARNING,
                    target,
                    f"{s.name}={s.value}",
                    75 if endpoint else 55,
                )
            )
        findings.sort(key=lambda f: -float(f.evidence.rsplit("=", 1)[-1]))
        return findings[:3]

    def _errors(self, samples: list[Sample]) -> list[Finding]:
        threshold = float(settings.DIAGNOSTICS_ERROR_RATE_THRESHOLD)
        totals: dict[str, float] = defaultdict(float)
        errors: dict[str, float] = defaultdict(float)
        findings = []
        for s in samples:
            if "requests" not in s.name or s.name.endswith(("_bucket", "_sum")):
                continue
            code = s.labels.get("code") or s.labels.get("status") or s.labels.get("status_code") or ""
            totals[s.target] += s.value
            if code.startswith("5"):
                errors[s.target] += s.value
        for target, total in totals.items():
            if total >= 10 and errors[target] / total >= threshold:
                ratio = errors[target] / total
                findings.append(
                    Finding(
                        "error_rate",
                        f"Error-rate spike: {ratio:.0%} of the requests to {target or 'the service'} fail "
                        "with HTTP 5xx.",
                        Severity.CRITICAL,
                        target,
                        f"{errors[target]:g}/{total:g} 5xx",
                        65,
                    )
                )
        for s in samples:
            if s.name.endswith("error_ratio") and s.value >= threshold:
                findings.append(
                    Finding(
                        "error_rate",
                        f"Error-rate spike: {s.target or 'the service'} error ratio is {s.value:.0%}.",
                        Severity.CRITICAL,
                        s.target,
                        f"{s.name}={s.value}",
                        65,
                    )
                )
        return findings


_SECTION = re.compile(r"^==\s*([\w.-]+)\s*:?", re.MULTILINE)
_KV = re.compile(r"\b(error_ratio|p95_ms|p99_ms|errors_5xx|requests)=([\d.]+)")


@register
class MetricsSummaryAnalyzer(Analyzer):
    """``key=value`` request summaries (``requests=120 errors_5xx=30 error_ratio=0.25 p95_ms=2400``)."""

    name = "metrics_summary"

    def applies(self, out: ToolOutput) -> bool:
        return _KV.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        error_threshold = float(settings.DIAGNOSTICS_ERROR_RATE_THRESHOLD)
        latency_ms = float(settings.DIAGNOSTICS_LATENCY_THRESHOLD_S) * 1000
        findings = []
        default = str(out.params.get("service") or out.params.get("name") or "")
        for line in out.text.splitlines():
            values = {k: float(v) for k, v in _KV.findall(line)}
            if not values:
                continue
            section = _SECTION.match(line)
            target = section.group(1) if section else default
            ratio = values.get("error_ratio")
            if ratio is not None and ratio >= error_threshold and values.get("requests", 10) >= 10:
                findings.append(
                    Finding(
                        "error_rate",
                        f"Error-rate spike in {target or 'the service'}: {ratio:.0%} of requests fail with "
                        f"HTTP 5xx ({values.get('errors_5xx', 0):.0f} of {values.get('requests', 0):.0f}).",
                        Severity.CRITICAL,
                        target,
                        line.strip()[:200],
                        66,
                        remedy=Remedy(("rollback", "restart"), target, {}, f"roll back or restart {target}"),
                    )
                )
            p95 = values.get("p99_ms") or values.get("p95_ms")
            if p95 is not None and p95 >= latency_ms:
                findings.append(
                    Finding(
                        "high_latency",
                        f"High latency in {target or 'the service'}: p95 {p95:.0f} ms (threshold "
                        f"{latency_ms:.0f} ms).",
                        Severity.WARNING,
                        target,
                        line.strip()[:200],
                        58,
                        remedy=Remedy(("rollback", "restart"), target, {}, f"roll back or restart {target}"),
                    )
                )
        return findings


_PERCENT_USED = re.compile(r"(\d+(?:\.\d+)?)%\s*(?:of quota|used|full)")
_DF_ROW = re.compile(r"^(\S+)\s+\S+\s+\S+\s+\S+\s+(\d+)%\s+(\S+)$")


def _usage_rows(text: str) -> list[tuple[str, float]]:
    rows = []
    for line in text.splitlines():
        if "%" not in line or len(line) > 500:
            continue
        if match := _PERCENT_USED.search(line):
            rows.append((line.split()[0], float(match.group(1))))
        elif match := _DF_ROW.match(line.strip()):
            rows.append((match.group(3), float(match.group(2))))
    return rows


@register
class DiskUsageAnalyzer(Analyzer):
    name = "disk_usage"

    def applies(self, out: ToolOutput) -> bool:
        return "%" in out.text and bool(_usage_rows(out.text))

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        threshold = float(settings.DIAGNOSTICS_DISK_THRESHOLD_PERCENT)
        findings = []
        seen: set[str] = set()
        rows = _usage_rows(out.text)
        for where, used in rows:
            if used < threshold or where in seen:
                continue
            seen.add(where)
            folder = str(out.params.get("folder") or where)
            findings.append(
                Finding(
                    "disk_full",
                    f"The disk space of {where} is {used:.0f}% used (threshold {threshold:.0f}%): writes "
                    "will fail when it is full.",
                    Severity.CRITICAL if used >= 99 else Severity.WARNING,
                    f"disk/{where}",
                    f"{where} {used:.1f}%",
                    78,
                    "Free space (delete old files) or grow the volume/quota.",
                    Remedy(
                        ("clear_quota_folder", "clear", "clean_disk", "cleanup", "free_disk"),
                        folder,
                        {"folder": folder},
                        f"free space in {folder}",
                    ),
                )
            )
        return findings


_TOP_ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+\d+\s*$", re.MULTILINE)


@register
class ProcessTopAnalyzer(Analyzer):
    """Per-process CPU% tables (``NAME PID CPU% RSS UPTIME``): a process burning a whole CPU."""

    name = "process_top"

    def applies(self, out: ToolOutput) -> bool:
        return "CPU%" in out.text and _TOP_ROW.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        # A busy loop in a Python thread shows at 60-90% (it shares the GIL with the serving threads);
        # on a machine whose cores are busy with other work it gets less, so a process that burns
        # many times the CPU of every other one is flagged too (an outlier, not a level).
        threshold = float(settings.DIAGNOSTICS_CPU_THRESHOLD_PERCENT)
        outlier = float(settings.DIAGNOSTICS_CPU_OUTLIER_PERCENT)
        rows = [(name, pid, float(cpu)) for name, pid, cpu, _rss in _TOP_ROW.findall(out.text)]
        findings = []
        for name, pid, cpu in rows:
            others = max([c for n, _p, c in rows if n != name] or [0.0])
            if cpu < threshold and not (len(rows) >= 3 and cpu >= outlier and cpu >= 5 * max(others, 1.0)):
                continue
            findings.append(
                Finding(
                    "cpu_saturation",
                    f"Process {name} uses {cpu:.0f}% CPU (a CPU hog or a busy loop; the busiest other "
                    f"process uses {others:.0f}%).",
                    Severity.WARNING,
                    f"process/{name}",
                    f"{name} pid {pid} CPU {cpu:.1f}%",
                    64,
                    f"Find what {name} is busy with; restart it if it is stuck.",
                    Remedy(("restart",), name.split("_")[0], {}, f"restart {name}"),
                )
            )
        return findings


LATENCY_KINDS = ("slow_endpoint", "high_latency")


@register_correlator
def cpu_bound_latency(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """A process burning CPU while requests are slow, whichever output comes first: the busy process
    most likely makes them slow (it and its callers wait for CPU), so it is the cause to fix."""
    busy = state.fact_dict("cpu_saturated")  # service -> the finding's summary
    slow = state.fact_dict("slow_services")  # service -> the finding's summary
    for finding in findings:
        if finding.kind == "cpu_saturation" and finding.remedy is not None:
            busy.setdefault(finding.remedy.target or service_of(finding.subject), finding.summary)
        elif finding.kind in LATENCY_KINDS:
            slow.setdefault(service_of(finding.subject) or "the service", finding.summary)
    reported = state.fact_set("cpu_bound_latency")
    out = []
    for service, usage in busy.items():
        if not slow or service in reported:
            continue
        reported.add(service)
        example = slow.get(service) or next(iter(slow.values()))
        out.append(
            Finding(
                "cpu_bound_latency",
                f"{service} is busy on CPU while requests are slow in {', '.join(sorted(slow))}: the CPU use "
                f"of {service} most likely makes them slow ({clip(usage, 100)}; {clip(example, 120)}).",
                Severity.CRITICAL,
                f"process/{service}",
                clip(usage),
                80,
                f"Find what {service} is busy with (a busy loop, a runaway thread); restart it if stuck.",
                Remedy(("restart",), service, {}, f"restart {service}"),
            )
        )
    return out
