"""Analyzers that name the decisive fact, in metrics: the slow endpoint behind a latency query (and what a
filtering query says of the others), a histogram's quantiles from a scrape, the prometheus toolset's
rendering, a volume's free ratio. The inputs use names that appear in no case, so a rule keyed to a case's
entities fails."""

from __future__ import annotations

import json

from tests.support.findings import findings_of, kinds


def test_the_slow_endpoint_behind_a_latency_query_is_named():
    query = "histogram_quantile(0.95, sum by (le, handler) (rate(http_server_duration_seconds_bucket[5m])))"
    result = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {"metric": {"service": "s", "handler": "/fast"}, "value": [0, "0.02"]},
                    {"metric": {"service": "s", "handler": "/v2/export"}, "value": [0, "4.5"]},
                ],
            },
        }
    )
    found, _ = findings_of(result, tool="execute_prometheus_instant_query", params={"query": query})
    slow = [f for f in found if f.kind == "slow_endpoint"]
    assert len(slow) == 1 and "/v2/export" in slow[0].summary and "p95" in slow[0].summary


def test_a_filtering_query_by_route_that_returns_one_route_says_the_others_are_under_its_bound():
    query = (
        "histogram_quantile(0.99, sum by (le, path) "
        '(rate(rpc_latency_seconds_bucket{app="ferro"}[5m]))) > 0.5'
    )
    result = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": {"app": "ferro", "path": "/q/fold"}, "value": [0, "2.25"]}],
            },
        }
    )
    found, _ = findings_of(result, tool="execute_prometheus_instant_query", params={"query": query})
    slow = [f for f in found if f.kind == "slow_endpoint"]
    assert len(slow) == 1 and "/q/fold" in slow[0].summary
    assert "No other path is past 0.5 s" in slow[0].summary and "the other paths are fast" in slow[0].summary
    # Not grouped by an endpoint label: nothing can be said of other endpoints.
    ungrouped = query.replace("sum by (le, path)", "sum by (le)")
    found, _ = findings_of(result, tool="execute_prometheus_instant_query", params={"query": ungrouped})
    assert not any("other path" in f.summary for f in found)


def test_a_metrics_scrape_histogram_gives_each_routes_quantile():
    lines = []
    for route, counts in (("/orders/{id}", (0, 0, 10, 100)), ("/ping", (100, 100, 100, 100))):
        for bound, count in zip(("0.1", "1", "5", "+Inf"), counts, strict=True):
            lines.append(f'app_request_duration_seconds_bucket{{route="{route}",le="{bound}"}} {count}')
    found, _ = findings_of("\n".join(lines), tool="fetch_service_metrics", params={"service": "orders"})
    slow = [f for f in found if f.kind == "slow_endpoint"]
    # rank 99 of 100 falls in the +Inf bucket: the quantile is the highest finite bound, 5 s
    assert len(slow) == 1 and "/orders/{id}" in slow[0].summary and "5.00 s" in slow[0].summary
    assert "orders" in slow[0].summary and "other endpoints are fast: /ping" in slow[0].summary


def test_the_prometheus_toolsets_rendering_is_read_by_the_metric_analyzers():
    rendered = (
        '{handler="/slow"} => 2.5 @ 2026-12-01T10:00:00Z\n'
        '{handler="/ok"} => 0.01 @ 2026-12-01T10:00:00Z\n'
        'up{instance="10.0.0.5:9100", job="node"} => 0 @ 2026-12-01T10:00:00Z\n'
    )
    query = "histogram_quantile(0.99, sum by (le, handler) (rate(http_duration_seconds_bucket[5m])))"
    found, _ = findings_of(rendered, tool="execute_prometheus_instant_query", params={"query": query})
    assert {"slow_endpoint", "target_down"} <= kinds(found)
    down = next(f for f in found if f.kind == "target_down")
    assert "node" in down.summary and "10.0.0.5:9100" in down.summary


def test_a_volume_with_almost_no_free_space_is_named_from_the_ratio_query():
    query = (
        'kubelet_volume_stats_available_bytes{persistentvolumeclaim="plum-store-data"}'
        ' / kubelet_volume_stats_capacity_bytes{persistentvolumeclaim="plum-store-data"}'
    )

    def result(value: str) -> str:
        metric = {"namespace": "umbra", "persistentvolumeclaim": "plum-store-data"}
        return json.dumps(
            {
                "status": "success",
                "data": {"resultType": "vector", "result": [{"metric": metric, "value": [0, value]}]},
            }
        )

    found, _ = findings_of(result("0.021"), tool="execute_prometheus_instant_query", params={"query": query})
    full = [f for f in found if f.kind == "volume_full"]
    assert len(full) == 1 and "plum-store-data" in full[0].summary and "2.1%" in full[0].summary
    roomy, _ = findings_of(result("0.4"), tool="execute_prometheus_instant_query", params={"query": query})
    assert "volume_full" not in kinds(roomy)
