"""Metrics -> CPU throttling, latency, error rate, memory pressure, full volumes and disks: the samples
(samples.py), the analyzers of metric series (series.py) and of plain-text summaries (summaries.py), and the
correlator that ties a busy process to slow requests (correlation.py); a query's result with its times
(results.py), how fast a predicted metric moves (trends.py), and latency against its own earlier level or
the alert's objective (baselines.py)."""

from diagnostics.agent.evidence.analyzers.metrics import baselines, correlation, series, summaries, trends  # noqa: F401  (registration)
from diagnostics.agent.evidence.analyzers.metrics.correlation import LATENCY_KINDS, cpu_bound_latency
from diagnostics.agent.evidence.analyzers.metrics.samples import (
    ENDPOINT_LABELS,
    LATENCY_NAME,
    Sample,
    endpoint_label,
    endpoint_of,
    groups_by_endpoint,
    histogram_quantiles,
    named_by_query,
    parse_samples,
)
from diagnostics.agent.evidence.analyzers.metrics.series import VOLUME_FREE_MIN, MetricsAnalyzer
from diagnostics.agent.evidence.analyzers.metrics.summaries import (
    DiskUsageAnalyzer,
    MetricsSummaryAnalyzer,
    ProcessTopAnalyzer,
)

__all__ = [
    "ENDPOINT_LABELS",
    "LATENCY_KINDS",
    "LATENCY_NAME",
    "VOLUME_FREE_MIN",
    "DiskUsageAnalyzer",
    "MetricsAnalyzer",
    "MetricsSummaryAnalyzer",
    "ProcessTopAnalyzer",
    "Sample",
    "cpu_bound_latency",
    "endpoint_label",
    "endpoint_of",
    "groups_by_endpoint",
    "histogram_quantiles",
    "named_by_query",
    "parse_samples",
]
