"""The prometheus read toolset over httpx, against hand-written Prometheus HTTP API responses (request
shapes, errors, auth); test_prometheus_real.py runs the same toolset against a real server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from diagnostics.toolsets.base import ReadToolset, WriteToolset
from diagnostics.toolsets.prometheus import (
    PrometheusConfig,
    PrometheusReadToolset,
    ToolsetNotConfigured,
    parse_time,
)
from tests.support.fixture_server import FixtureServer

ERROR_RATE = (
    'sum by (job, namespace, pod, code) (rate(http_requests_total{namespace="shop",code=~"5.."}[5m]))'
)
LATENCY = (
    "histogram_quantile(0.95, sum by (le, job, namespace) "
    '(rate(http_request_duration_seconds_bucket{job="checkout"}[5m])))'
)


@pytest.fixture(scope="module")
def server() -> Iterator[FixtureServer]:
    with FixtureServer("prometheus", {"prom-token": {"GET"}}).running() as fixture:
        yield fixture


@pytest.fixture
def prom(server: FixtureServer) -> PrometheusReadToolset:
    server.requests.clear()
    return PrometheusReadToolset(
        PrometheusConfig(url=server.url + "/", bearer_token="prom-token", timeout_s=5)
    )


def test_off_unless_configured(settings: Any) -> None:
    settings.DIAGNOSTICS_PROMETHEUS_URL = None
    with pytest.raises(ToolsetNotConfigured):
        PrometheusReadToolset()
    settings.DIAGNOSTICS_PROMETHEUS_URL = "http://prometheus:9090"
    assert PrometheusReadToolset().name == "prometheus"


def test_instant_query_renders_each_series(prom: PrometheusReadToolset, server: FixtureServer) -> None:
    result = prom.call("execute_prometheus_instant_query", {"query": ERROR_RATE})
    assert result.ok and not result.no_data
    lines = result.output.splitlines()
    assert len(lines) == 2
    assert (
        lines[0].startswith('{code="500", job="checkout", namespace="shop"')
        and "=> 4.133333333333334" in lines[0]
    )
    request = server.requests[-1]
    assert (
        request.method == "GET" and request.path == "/api/v1/query" and request.query == {"query": ERROR_RATE}
    )
    assert request.headers["authorization"] == "Bearer prom-token"


def test_down_targets_and_up_query(prom: PrometheusReadToolset) -> None:
    up = prom.call("execute_prometheus_instant_query", {"query": "up"}).output
    assert 'up{instance="10.244.1.30:8080", job="checkout", namespace="shop"} => 0' in up
    down = prom.call("list_prometheus_targets", {"health": "down"})
    assert down.ok and "checkout http://10.244.1.30:8080/metrics health=down" in down.output
    assert "connect: connection refused" in down.output
    assert "node-exporter" not in down.output
    assert len(prom.call("list_prometheus_targets", {}).output.splitlines()) == 3


def test_range_query_summarizes_the_series(prom: PrometheusReadToolset, server: FixtureServer) -> None:
    result = prom.call("execute_prometheus_range_query", {"query": LATENCY, "start": "-1h", "step": 180})
    assert result.ok
    assert 'job="checkout"' in result.output and "20 points" in result.output
    assert "min=0.079 max=1.372 last=1.372" in result.output
    query = server.requests[-1].query
    assert float(query["end"]) - float(query["start"]) == pytest.approx(3600, abs=2)
    assert query["step"] == "180"


def test_alerts_with_annotations(prom: PrometheusReadToolset) -> None:
    firing = prom.call("list_prometheus_alerts", {"state": "firing"}).output
    assert "KubePodCrashLooping [firing]" in firing and 'pod="payment-worker-747ccfb9db-78qds"' in firing
    assert "CrashLoopBackOff" in firing and "CheckoutHighLatency" not in firing
    pending = prom.call("list_prometheus_alerts", {"state": "pending"}).output
    assert "CheckoutHighLatency [pending]" in pending and "p95 latency of checkout is 1.37s" in pending


def test_errors_and_empty_results_are_results_not_exceptions(prom: PrometheusReadToolset) -> None:
    bad = prom.call("execute_prometheus_instant_query", {"query": "sum(rate(http_requests_total[5m]"})
    assert not bad.ok and "bad_data" in bad.output and "unclosed left parenthesis" in bad.output
    empty = prom.call(
        "execute_prometheus_instant_query",
        {"query": 'kube_pod_container_status_restarts_total{namespace="nope"}'},
    )
    assert empty.ok and empty.no_data
    scalar = prom.call("execute_prometheus_instant_query", {"query": "scalar(count(up == 0)) + 2"})
    assert scalar.output.startswith("scalar: 3 @ ")
    assert not prom.call("execute_prometheus_instant_query", {}).ok
    assert not prom.call("execute_prometheus_range_query", {"query": "up", "start": "yesterday"}).ok
    assert not prom.call("delete_series", {"match": "up"}).ok
    unreachable = PrometheusReadToolset(PrometheusConfig(url="http://127.0.0.1:9", timeout_s=1))
    result = unreachable.call("list_prometheus_alerts", {})
    assert not result.ok and "unreachable" in result.output


def test_read_only_by_construction(prom: PrometheusReadToolset, server: FixtureServer) -> None:
    assert isinstance(prom, ReadToolset) and not isinstance(prom, WriteToolset)
    for tool, params in [
        ("execute_prometheus_instant_query", {"query": "up"}),
        ("list_prometheus_alerts", {}),
        ("list_prometheus_targets", {}),
    ]:
        prom.call(tool, params)
    assert {r.method for r in server.requests} == {"GET"}
    assert all(r.path.startswith("/api/v1/") and "admin" not in r.path for r in server.requests)
    assert all(isinstance(v, str | int | float | type(None)) for v in vars(prom).values())


def test_parse_time_forms() -> None:
    now = 1_764_409_500.0
    assert parse_time("now", now) == now
    assert parse_time("-15m", now) == now - 900
    assert parse_time("1764409000", now) == 1764409000.0
    assert parse_time("2026-11-29T09:45:00Z", now) == pytest.approx(1795945500.0)
