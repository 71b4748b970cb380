"""Metric series (Prometheus samples) -> targets down, CPU throttling and saturation, latency, error
rate, full volumes."""

from __future__ import annotations

from collections import defaultdict

from diagnostics import conf as diagnostics_conf
from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.evidence.analyzers.metrics.samples import (
    LATENCY_NAME,
    Sample,
    endpoint_label,
    endpoint_of,
    groups_by_endpoint,
    has_samples,
    histogram_quantiles,
    named_by_query,
    parse_samples,
)
from diagnostics.agent.findings import Finding, Remedy, Severity

VOLUME_FREE_MIN = 0.05  # a volume with less free space than this is full for practical purposes

_COMPARISON = rx.compile(r"(?:>|>=)\s*([\d.]+(?:e[-+]?\d+)?)\s*$", rx.IGNORECASE)


def _bound(out: ToolOutput) -> float | None:
    """The threshold of a filtering query (``... > 0.1``, like an alert's expression): every series it
    returns is past it, so that is the bound the results are judged by."""
    match = _COMPARISON.search(str(out.params.get("query") or "").strip())
    return float(match.group(1)) if match else None


@register
class MetricsAnalyzer(Analyzer):
    name = "metrics"

    def applies(self, out: ToolOutput) -> bool:
        return has_samples(out.text)

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
        findings += _filling(samples, query)
        return findings

    @staticmethod
    def _volumes(samples: list[Sample]) -> list[Finding]:
        """A volume's free share (available / capacity bytes) near zero: writes to it are about to fail."""
        findings = []
        for s in samples:
            # A share is in [0, 1]: a query that is no ratio (a predict_linear in bytes, a rate) is not one.
            if s.name != "volume_available_ratio" or not 0 <= s.value < VOLUME_FREE_MIN:
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
        threshold = diagnostics_conf.get().analyzers.throttling
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
        threshold = diagnostics_conf.get().analyzers.latency_s
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
        threshold = diagnostics_conf.get().analyzers.error_rate
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


_PREDICT = rx.compile(r"predict_linear\(\s*[^\[]*available_bytes[^\[]*\[(\w+)\]\s*,\s*([\d\s*.]+)\)\s*<\s*0")


def _seconds(expr: str) -> float | None:
    """``4 * 24 * 3600`` -> 345600.0 (PromQL's scalar arithmetic, products only)."""
    try:
        total = 1.0
        for factor in expr.split("*"):
            total *= float(factor)
    except ValueError:
        return None
    return total


def _filling(samples: list[Sample], query: str) -> list[Finding]:
    """A volume predicted to fill: ``predict_linear(available_bytes[W], H) < 0`` (kubelet's volume stats)
    says that at the rate of the last W the free bytes reach zero within H; the series an ``and`` keeps
    are the free shares (available / capacity) of the volumes it predicts."""
    match = _PREDICT.search(query)
    horizon = _seconds(match.group(2)) if match else None
    if match is None or not horizon:
        return []
    raw: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for s in samples:
        if s.name.startswith("kubelet_volume_stats_") and s.labels.get("persistentvolumeclaim"):
            raw[(s.labels.get("namespace", ""), s.labels["persistentvolumeclaim"])][s.name[21:]] = s.value
    shares = [s for s in samples if s.name in ("", "volume_available_ratio") and 0 <= s.value <= 1]
    for (namespace, claim), values in raw.items():
        if values.get("capacity_bytes") and "available_bytes" in values:
            share = values["available_bytes"] / values["capacity_bytes"]
            shares.append(Sample("", {"namespace": namespace, "persistentvolumeclaim": claim}, share))
    findings: list[Finding] = []
    reported: set[str] = set()
    for s in shares:
        claim = s.labels.get("persistentvolumeclaim", "")
        if not claim or claim in reported:
            continue
        reported.add(claim)
        days = horizon / 86400
        findings.append(
            Finding(
                "volume_filling",
                f"The volume of PVC {claim} has {s.value:.1%} free, and at the rate of the last "
                f"{match.group(1)} predict_linear expects it to fill within {days:g} days ({horizon:g}s): "
                "writes will fail then.",
                Severity.WARNING,
                f"persistentvolumeclaim/{s.labels.get('namespace', '')}/{claim}".replace("//", "/"),
                f"available/capacity={s.value:g}",
                60,
                f"Find what writes to PVC {claim} (retention, logs, a runaway job) or expand it.",
            )
        )
    return findings
