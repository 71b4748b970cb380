"""A duration in a log is latency only when it is a request served (issue 39): a job, step, batch, cron run
or migration that reports how long it took is work done, not a caller waiting. The lines are written for
these tests."""

from __future__ import annotations

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.durations import SERVED, UNKNOWN, WORK, measured
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext

_LATENCY = ("high_latency", "slow_database")


def _latency(lines: list[str]) -> list[Finding]:
    log = "".join(f"2027-03-02T04:{i:02d}:10Z INFO {line}\n" for i, line in enumerate(lines))
    out = ToolOutput("fetch_pod_logs", {"pod_name": "orders-5f6d7c8b9-q2w3e", "namespace": "shop"}, log)
    return [f for f in analyze(out, AnalysisState(AlertContext())) if f.kind in _LATENCY]


WORK_DONE = [
    ["batch 8812 done in 31s", "batch 8813 done in 29s", "batch 8814 done in 34s"],
    ["nightly-export job finished in 412 seconds"],
    ["step 3/5 (resize thumbnails) took 18s", "step 4/5 (upload) took 44s"],
    ["cron purge-sessions completed in 7.5 s", "cron purge-sessions completed in 8.1 s"],
    ["db migration 0042_add_index completed in 40 s"],  # database words, still work done
    ["Backup of ledger-db finished after 95 seconds"],
    ['{"msg": "reindex task processed", "duration_ms": 61000}'],
    ["sync of 1200 accounts took 12s", "sync of 1190 accounts took 13s", "sync of 1300 accounts took 12s"],
]


@pytest.mark.parametrize("lines", WORK_DONE)
def test_a_duration_of_work_done_is_not_latency(lines: list[str]) -> None:
    assert _latency(lines) == []


SERVED_SLOWLY = [
    (["GET /api/orders/17 200 took 2.4s", "GET /api/orders/18 200 took 3.1s"], "high_latency"),
    (["Page rendered in 6.2 seconds", "Page rendered in 7.9 seconds"], "high_latency"),
    (["rpc Quote responded in 2300 ms", "rpc Quote responded in 2750 ms"], "high_latency"),
    (["query completed in 2300 ms", "query completed in 2750 ms"], "slow_database"),
    (["Database call completed in 5.5 seconds", "Database call completed in 6 seconds"], "slow_database"),
    (['{"path": "/cart", "status": 200, "duration_ms": 2900}'], "high_latency"),
    (['{"responseTime": 4100, "msg": "done"}'], "high_latency"),
    # a request that starts a job is still a request: the route and status win over the word 'job'
    (["POST /jobs/42 status=202 took 3.2s", "POST /jobs/43 status=202 took 2.9s"], "high_latency"),
]


@pytest.mark.parametrize(("lines", "kind"), SERVED_SLOWLY)
def test_a_request_served_slowly_is_latency(lines: list[str], kind: str) -> None:
    found = _latency(lines)
    assert [f.kind for f in found] == [kind], [f.summary for f in found]
    assert "INFO" not in found[0].summary and "2027-" not in found[0].summary


def test_the_same_requests_served_fast_are_not_latency() -> None:
    assert _latency(["GET /api/orders/17 200 took 12ms", "GET /api/orders/18 200 took 30ms"]) == []


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("batch 4471 done in 29s", WORK),
        ("migration 0007 finished in 3 s", WORK),
        ("cronjob report-daily completed in 55s", WORK),
        ('10.1.0.7 - - "GET /cart HTTP/1.1" 200 512 took 2s', SERVED),
        ("slow request GET /v1/route took 2517ms", SERVED),
        ("handler /checkout executed in 1.9 s", SERVED),
        ("rebalance done in 4s", UNKNOWN),
    ],
)
def test_what_a_logged_duration_measures(line: str, kind: str) -> None:
    assert measured(line) == kind


def test_an_unknown_duration_is_not_counted_as_latency() -> None:
    assert _latency(["rebalance done in 14s", "rebalance done in 16s", "rebalance done in 15s"]) == []
