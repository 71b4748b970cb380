"""The closed-loop table (capacity and CPU per call at each connection count) and issue 42's "Done when"
checks, computed from this run's results: pass, FAIL, or unknown where the run lacks a number (unknown is
not pass)."""

from __future__ import annotations

from typing import Any

from bench.gateway_overhead.common import TARGET_ORDER

CPU_LIMIT_MS = 1.5
ADDED_P50_FACTOR = 2.0
FLAT_WITHIN = 0.10
ADDED_RATE = 100.0
GATEWAY = "skillgate-full"
FLOOR = "floor"

Closed = dict[tuple[str, str, int], dict[str, Any]]
Known = dict[tuple[str, str, float], dict[str, Any]]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def closed_table(closed: Closed, counts: list[int]) -> list[str]:
    if not closed:
        return []
    low, high = min(counts), max(counts)
    rows = [
        f"| target | mode | calls/s at {low} | calls/s at {high} | {high}/{low} "
        f"| CPU ms/call at {low} | CPU ms/call at {high} | {high}/{low} "
        f"| P50 ms at {low} / {high} | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    order = {name: i for i, name in enumerate(TARGET_ORDER)}
    names = sorted({name for name, _, _ in closed}, key=lambda n: order.get(n, 99))
    for mode in ("json", "stream"):
        for name in names:
            a, b = closed.get((name, mode, low)), closed.get((name, mode, high))
            cap = [r["achieved"] if r else None for r in (a, b)]
            cpu = [r["cpu_ms_per_call"] if r else None for r in (a, b)]
            p50 = [_fmt((r["ttlb_ms"] or {}).get("p50")) if r else "–" for r in (a, b)]
            errors = sum(r["errors"] for r in (a, b) if r)
            rows.append(
                f"| {name} | {mode} | {_fmt(cap[0])} | {_fmt(cap[1])} | {_fmt(_ratio(cap[1], cap[0]), 2)} "
                f"| {_fmt(cpu[0], 3)} | {_fmt(cpu[1], 3)} | {_fmt(_ratio(cpu[1], cpu[0]), 2)} "
                f"| {p50[0]} / {p50[1]} | {errors} |"
            )
    return rows


def _verdict(ok: bool | None) -> str:
    return "unknown" if ok is None else ("pass" if ok else "**FAIL**")


def _added_p50(known: Known, target: str, mode: str) -> tuple[float | None, bool]:
    """(added P50 ms at ADDED_RATE, whether the target sustained that rate)."""
    point, base = known.get((target, mode, ADDED_RATE)), known.get(("direct", mode, ADDED_RATE))
    if not point or not base or not point["ttlb_ms"] or not base["ttlb_ms"]:
        return None, bool(point and point["passed"])
    return float(point["ttlb_ms"]["p50"] - base["ttlb_ms"]["p50"]), bool(point["passed"])


def checks(closed: Closed, known: Known, counts: list[int]) -> list[tuple[str, str, str]]:
    """(check, numbers, verdict) rows of issue 42's "Done when", JSON and streams."""
    low, high = (min(counts), max(counts)) if counts else (0, 0)
    rows: list[tuple[str, str, str]] = []
    for mode in ("json", "stream"):

        def get(name: str, count: int, field: str, mode: str = mode) -> float | None:
            """A closed-loop number; a floor's client timeouts (its queue at 256) still leave its capacity."""
            result = closed.get((name, mode, count))
            return None if result is None or result[field] is None else float(result[field])

        def clean(ok: bool | None, *at: int, mode: str = mode) -> bool | None:
            """A gateway point with errors passes nothing (its errors are in the closed-loop table)."""
            errors = sum((closed.get((GATEWAY, mode, count)) or {}).get("errors", 0) for count in at)
            return False if ok is not None and errors else ok

        for count in sorted(set(counts)):
            ours, floor = get(GATEWAY, count, "achieved"), get(FLOOR, count, "achieved")
            ok = clean(None if ours is None or floor is None else ours >= floor, count)
            rows.append(
                (
                    f"{mode}: capacity ≥ the floor's (uvicorn + httpx), {count} connections",
                    f"{_fmt(ours)} vs {_fmt(floor)} calls/s",
                    _verdict(ok),
                )
            )
        cpu = get(GATEWAY, low, "cpu_ms_per_call")
        rows.append(
            (
                f"{mode}: CPU ≤ {CPU_LIMIT_MS} ms per call, {low} connections",
                f"{_fmt(cpu, 3)} ms",
                _verdict(clean(None if cpu is None else cpu <= CPU_LIMIT_MS, low)),
            )
        )
        (ours_added, sustained), (floor_added, floor_held) = (
            _added_p50(known, GATEWAY, mode),
            _added_p50(known, FLOOR, mode),
        )
        # the bar is the floor's added P50 at a rate it sustains; a floor's queue is no bar
        limit = None if floor_added is None or not floor_held else ADDED_P50_FACTOR * max(floor_added, 0.0)
        added_ok = None if ours_added is None or limit is None else ours_added <= limit and sustained
        notes = [
            f"{name} did not sustain {ADDED_RATE:.0f} RPS"
            for name, held, value in ((GATEWAY, sustained, ours_added), (FLOOR, floor_held, floor_added))
            if value is not None and not held
        ]
        rows.append(
            (
                f"{mode}: added P50 at {ADDED_RATE:.0f} RPS ≤ {ADDED_P50_FACTOR:g}x the floor's",
                f"{_fmt(ours_added, 2)} ms vs {_fmt(limit, 2)} ms (floor {_fmt(floor_added, 2)} ms)"
                + "".join(f"; {note}" for note in notes),
                _verdict(added_ok),
            )
        )
        cap = _ratio(get(GATEWAY, high, "achieved"), get(GATEWAY, low, "achieved"))
        cost = _ratio(get(GATEWAY, high, "cpu_ms_per_call"), get(GATEWAY, low, "cpu_ms_per_call"))
        flat = None if cap is None or cost is None else cap >= 1 - FLAT_WITHIN and cost <= 1 + FLAT_WITHIN
        rows.append(
            (
                f"{mode}: at {high} connections within {FLAT_WITHIN:.0%} of {low} (capacity ≥ "
                f"{1 - FLAT_WITHIN:g}x, CPU per call ≤ {1 + FLAT_WITHIN:g}x: more capacity is no loss)",
                f"capacity x{_fmt(cap, 2)}, CPU per call x{_fmt(cost, 2)}",
                _verdict(clean(flat, low, high)),
            )
        )
    return rows


def checks_table(closed: Closed, known: Known, counts: list[int]) -> list[str]:
    rows = [f"| check ({GATEWAY}, every feature on) | this run | verdict |", "|---|---|---|"]
    rows += [
        f"| {check} | {numbers} | {verdict} |" for check, numbers, verdict in checks(closed, known, counts)
    ]
    return rows
