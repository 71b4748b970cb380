"""Thin latency evidence (issue 39): a latency series well above its own earlier level, or above the
objective the alert states, is a finding on its own with when it started; a service's 'slow request'
lines count against the requests its log shows, not only against an absolute number. Names appear in
no case."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.metrics.baselines import risen
from diagnostics.agent.request.subject import AlertContext

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
QUANTILE = (
    "histogram_quantile(0.99, sum by (le, service) "
    '(rate(rpc_server_duration_seconds_bucket{service="quotes"}[5m])))'
)


def _matrix(values: list[float], step: int = 60) -> str:
    points = [[(T0 + timedelta(seconds=i * step)).timestamp(), str(v)] for i, v in enumerate(values)]
    result = [{"metric": {"service": "quotes"}, "values": points}]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})


def _latency(findings: list[Any]) -> list[Any]:
    return [f for f in findings if f.kind == "high_latency"]


def _run(
    text: str,
    *,
    tool: str = "execute_prometheus_range_query",
    params: dict[str, Any] | None = None,
    alert: AlertContext | None = None,
) -> list[Any]:
    state = AnalysisState(alert or AlertContext(text="quotes is slow"))
    return analyze(ToolOutput(tool, params if params is not None else {"query": QUANTILE}, text), state)


def test_a_latency_quantile_risen_over_its_own_baseline_is_high_latency_from_when_it_rose() -> None:
    found = _latency(_run(_matrix([0.021, 0.019, 0.02, 0.022, 0.02, 0.31, 0.33, 0.32])))
    assert len(found) == 1 and found[0].subject == "quotes", found
    assert "rose from 20 ms to 325 ms" in found[0].summary
    assert "from 2026-03-02T09:05:00Z" in found[0].summary and "p99" in found[0].summary


def test_a_flat_or_tiny_latency_series_is_no_finding() -> None:
    assert not _latency(_run(_matrix([0.3, 0.31, 0.29, 0.3, 0.32, 0.3])))  # slow, but as it always was
    assert not _latency(_run(_matrix([0.002, 0.002, 0.002, 0.002, 0.006, 0.007])))  # 3x, by 5 ms: noise
    assert risen([(0.0, 0.02), (1.0, 0.3)]) is None  # two points are no baseline


def test_a_latency_series_over_the_alerts_objective_is_high_latency_without_a_baseline() -> None:
    alert = AlertContext(text="QuotesSlow firing", queries=[f"{QUANTILE} > 0.25"])
    found = _latency(_run(_matrix([0.4, 0.41, 0.39, 0.4]), alert=alert))
    assert found and "over the alert's objective of 250 ms since 2026-03-02T09:00:00Z" in found[0].summary
    assert not _latency(_run(_matrix([0.2, 0.21, 0.19, 0.2]), alert=alert))


def test_a_request_summary_over_the_objective_in_the_alerts_words_is_high_latency() -> None:
    summary = "== quotes: requests=420 errors_5xx=0 error_ratio=0.000 p50_ms=156 p95_ms=240"
    alert = AlertContext(text="the p95 latency of quotes is above 200 ms since this morning")
    found = _latency(_run(summary, tool="read_metrics", params={"service": "quotes"}, alert=alert))
    assert found and "p95 240 ms is over the alert's objective of 200 ms" in found[0].summary, found
    assert not _latency(_run(summary, tool="read_metrics", params={"service": "quotes"}))  # no objective


def _line(seconds: float, text: str) -> str:
    return f"{(T0 + timedelta(seconds=seconds)).strftime('%Y-%m-%d %H:%M:%S,120')} {text}"


def _window(seconds: float, requests: int, p50: int) -> str:
    return _line(seconds, f"INFO quotes[9] last 10s: {requests} requests, 0 errors (5xx), p50 {p50} ms")


def _slow(seconds: float) -> str:
    return _line(seconds, "WARNING quotes[9] slow request GET /v1/quote/7 took 163 ms")


def _log(lines: list[str]) -> list[Any]:
    return _latency(_run("\n".join(lines), tool="tail_log", params={"service": "quotes"}))


def test_a_logged_latency_summary_risen_over_its_earlier_level_is_high_latency() -> None:
    lines = [_window(10 * i, 40, 4) for i in range(6)] + [_window(60, 38, 150), _window(70, 39, 158)]
    found = _log(lines)
    assert found and "p50 latency it logs rose from 4 ms to 154 ms" in found[0].summary, found
    assert "from 2026-03-02T09:01:00Z" in found[0].summary
    assert not _log([_window(10 * i, 40, 4 + i % 2) for i in range(8)])


def test_two_slow_requests_count_against_the_requests_the_log_shows() -> None:
    few = [_window(0, 6, 90), _window(10, 5, 120), _slow(12), _slow(14)]
    found = _log(few)
    assert found and "2 slow requests of 11 requests" in found[0].summary, found
    many = [_window(0, 60, 4), _window(10, 55, 4), _slow(12), _slow(14)]
    assert not _log(many)  # 2 of 115: a few outliers
    assert not _log([_slow(12), _slow(14)])  # no request count: two lines alone are not a stream
    assert _log([_slow(12), _slow(13), _slow(14)])  # a steady stream, as before


def _slow_of(pid: int, seconds: float) -> str:
    return _line(seconds, f"WARNING quotes[{pid}] slow request GET /v1/quote/3 took 158 ms")


def _both(log: list[str], requests: int) -> list[Any]:
    """The log, then the metrics summary (counted since the process started), in one investigation."""
    state = AnalysisState(AlertContext(text="users report the quotes page fails"))
    found = analyze(ToolOutput("tail_log", {"service": "quotes"}, "\n".join(log)), state)
    summary = f"== quotes: requests={requests} errors_5xx=0 error_ratio=0.000 p50_ms=156 p95_ms=160"
    return _latency(found + analyze(ToolOutput("read_metrics", {"service": "quotes"}, summary), state))


def test_slow_lines_of_the_current_process_count_against_the_requests_counted_since_it_started() -> None:
    # Two slow lines since a restart, 9 requests counted since: no absolute stream, yet 22% of them.
    log = [_line(1, "INFO quotes[40] last 10s: 12 requests"), _slow_of(41, 60), _slow_of(41, 61)]
    found = _both(log, 9)
    assert len(found) == 1 and "2 of the 9 requests its metrics counted" in found[0].summary, found
    assert "median 156 ms" in found[0].summary
    assert not _both(log, 400)  # 2 of 400: outliers
    # The earlier process's warm-up line is not one of the current process's requests.
    assert not _both([_slow_of(40, 1), _slow_of(41, 60)], 3)
