"""Issue 42's "Done when" checks in bench/gateway_overhead's report are computed from the run's own points:
pass, FAIL, or unknown where a number is missing (unknown is not pass)."""

from __future__ import annotations

from typing import Any

from bench.gateway_overhead.verdict import checks, checks_table


def closed(achieved: float, cpu: float | None, errors: int = 0) -> dict[str, Any]:
    return {"achieved": achieved, "cpu_ms_per_call": cpu, "errors": errors, "ttlb_ms": {"p50": 5.0}}


def point(p50: float, passed: bool = True) -> dict[str, Any]:
    return {"ttlb_ms": {"p50": p50}, "passed": passed}


def test_a_run_that_meets_every_bound_passes_and_one_that_does_not_fails_where_it_misses():
    good = {
        ("skillgate-full", "json", 16): closed(800, 1.2),
        ("skillgate-full", "json", 256): closed(780, 1.25),
        ("floor", "json", 16): closed(700, 1.4),
        ("floor", "json", 256): closed(690, 1.4),
    }
    known = {
        ("direct", "json", 100.0): point(1.0),
        ("floor", "json", 100.0): point(2.0),  # +1.0 ms
        ("skillgate-full", "json", 100.0): point(2.8),  # +1.8 ms <= 2 x 1.0
    }
    rows = checks(good, known, [16, 256])
    assert [verdict for check, _, verdict in rows if check.startswith("json")] == ["pass"] * 5

    collapsed = {**good, ("skillgate-full", "json", 256): closed(500, 1.9)}
    slow = {**known, ("skillgate-full", "json", 100.0): point(3.5)}  # +2.5 ms > 2.0
    rows = checks(collapsed, slow, [16, 256])
    json_rows = {check: verdict for check, _, verdict in rows if check.startswith("json")}
    assert json_rows == {
        "json: capacity ≥ the floor's (uvicorn + httpx), 16 connections": "pass",
        "json: capacity ≥ the floor's (uvicorn + httpx), 256 connections": "**FAIL**",
        "json: CPU ≤ 1.5 ms per call, 16 connections": "pass",
        "json: added P50 at 100 RPS ≤ 2x the floor's": "**FAIL**",
        "json: at 256 connections within 10% of 16 (capacity ≥ 0.9x, CPU per call ≤ 1.1x: more capacity "
        "is no loss)": "**FAIL**",
    }


def test_missing_errored_or_unsustained_points_are_never_a_pass():
    rows = checks({("skillgate-full", "stream", 16): closed(900, 1.0, errors=3)}, {}, [16, 256])
    stream = {check.split(",")[0]: verdict for check, _, verdict in rows if check.startswith("stream")}
    assert stream["stream: CPU ≤ 1.5 ms per call"] == "**FAIL**"  # 1.0 ms, but with errors
    assert set(stream.values()) == {"**FAIL**", "unknown"}  # the floor's points are missing
    unsustained = {
        ("direct", "json", 100.0): point(1.0),
        ("floor", "json", 100.0): point(2.0),
        ("skillgate-full", "json", 100.0): point(1.5, passed=False),  # fast answers, but 100 RPS not held
    }
    added = [
        row for row in checks({}, unsustained, [16, 256]) if "added P50" in row[0] and row[0][:4] == "json"
    ]
    assert added[0][2] == "**FAIL**" and "skillgate-full did not sustain 100 RPS" in added[0][1]
    table = checks_table({}, {}, [16, 256])
    assert table[0].startswith("| check (skillgate-full, every feature on)") and len(table) == 2 + 10


def test_a_floor_that_did_not_sustain_the_rate_is_no_bar():
    queued_floor = {
        ("direct", "json", 100.0): point(1.0),
        ("floor", "json", 100.0): point(5000.0, passed=False),  # a queue, not the floor's overhead
        ("skillgate-full", "json", 100.0): point(12.0),
    }
    added = [row for row in checks({}, queued_floor, [16, 256]) if row[0].startswith("json: added")]
    assert added[0][2] == "unknown" and "floor did not sustain 100 RPS" in added[0][1]
