"""bench/gateway_overhead _counters turns the server's cumulative counts, read around each closed-loop point,
into per-call figures: new upstream connections and GC CPU per call, collections per 1000 calls."""

from __future__ import annotations

from bench.gateway_overhead.counters import _per_call, table


def test_counts_around_a_point_become_per_call_figures():
    before = {"calls": 100, "connections": 5, "gc_n": [10, 1, 0], "gc_cpu_s": [0.01, 0.002, 0.0]}
    after = {"calls": 1100, "connections": 605, "gc_n": [210, 21, 2], "gc_cpu_s": [0.07, 0.072, 0.02]}
    per = _per_call(before, after)
    assert per["calls"] == 1000 and per["connections"] == 0.6
    assert abs(per["gc_ms"] - 0.15) < 1e-9  # (0.06 + 0.07 + 0.02) s over 1000 calls
    assert per["gc_per_1000"] == [200.0, 20.0, 2.0]
    shown = table([(256, {"achieved": 650.0, "cpu_ms_per_call": 1.5}, per)], "json", [])
    assert "| 256 | 650.0 | 1.500 | 1000 | 0.600 | 0.150 | 200.0 / 20.0 / 2.0 |" in shown
    assert "(defaults)" in shown


def test_a_point_with_no_calls_counted_divides_by_one_not_zero():
    same = {"calls": 7, "connections": 1, "gc_n": [0, 0, 0], "gc_cpu_s": [0.0, 0.0, 0.0]}
    assert _per_call(same, same)["connections"] == 0.0
