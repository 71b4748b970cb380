"""GET /metrics: Prometheus text format (version 0.0.4).

What it answers: this process's call metrics (routing/call/metrics.py) and process metrics, or, in
multiprocess mode (PROMETHEUS_MULTIPROC_DIR set), the call metrics of every process on the machine
summed; then the current state from the database and the broker (app/observability/state.py), each
source guarded: one that fails is reported as ``skillgate_collector_up{collector} 0`` and left out,
so a scrape never fails because the broker is down.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from app import conf
from app.observability.replicas import StudentReplicaCollector
from app.observability.state import DatabaseStateCollector, QueueDepthCollector
from routing.call import metrics as calls

log = logging.getLogger(__name__)


class _Collected(Collector):
    """Metrics already collected, for generate_latest."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


def _guarded(sources: dict[str, Collector]) -> list[Metric]:
    up = GaugeMetricFamily(
        "skillgate_collector_up", "1 when the source was read for this scrape.", labels=["collector"]
    )
    metrics: list[Metric] = []
    for name, source in sources.items():
        try:
            metrics += list(source.collect())
            up.add_metric([name], 1.0)
        except Exception as exc:  # a source that fails is reported, never a failed scrape
            log.warning("metrics: the %s source failed: %s: %s", name, type(exc).__name__, exc)
            up.add_metric([name], 0.0)
    return [*metrics, up]


def _processes() -> Collector:
    if folder := conf.get().metrics.multiproc_dir:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=folder)
        return registry
    return REGISTRY


def render() -> bytes:
    calls.default().flush()  # this process's calls so far (and the metrics exist before the first call)
    state = _guarded(
        {
            "database": DatabaseStateCollector(),
            "broker": QueueDepthCollector(),
            "replicas": StudentReplicaCollector(),
        }
    )
    return generate_latest(_processes()) + generate_latest(_Collected(state))


def _plain(status: int, text: str, **headers: Any) -> HttpResponse:
    response = HttpResponse(text + "\n", status=status, content_type="text/plain; charset=utf-8")
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def metrics(request: HttpRequest) -> HttpResponse:
    metrics_conf = conf.get().metrics
    if not metrics_conf.enabled:
        return _plain(404, "metrics are off (SKILLGATE_METRICS_ENABLED)")
    if request.method not in ("GET", "HEAD"):
        return _plain(405, "GET only", Allow="GET, HEAD")
    if metrics_conf.token:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), metrics_conf.token.encode()
        ):
            return _plain(
                401, "send 'Authorization: Bearer <SKILLGATE_METRICS_TOKEN>'", WWW_Authenticate="Bearer"
            )
    return HttpResponse(render(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
