"""One measured point (a load generator run against one target at one rate) and the capacity search."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.gateway_overhead.children import Children, clean_env, pinned, run_captured
from bench.gateway_overhead.common import SUSTAIN_FRACTION, group_cpu_s, log
from bench.gateway_overhead.servers import Target

CLOSED_TIMEOUT_S = 60.0


@dataclass
class Settings:
    duration: float
    warmup: float
    timeout: float


def settle(groups: dict[str, int], limit_s: float = 30.0) -> None:
    """Wait until the servers are idle (after an overloaded point, backlogs drain first)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = sum(group_cpu_s(pgid) for pgid in groups.values())
        time.sleep(0.5)
        if sum(group_cpu_s(pgid) for pgid in groups.values()) - before < 0.05:
            return


def run_point(
    children: Children, target: Target, groups: dict[str, int], stream: bool, rate: float, cfg: Settings
) -> dict[str, Any]:
    settle(groups)
    argv = pinned("rest", [
        sys.executable, "-m", "bench.gateway_overhead", "_load",
        "--url", target.base_url, "--model", target.model, "--stream", str(int(stream)),
        "--rate", str(rate), "--duration", str(cfg.duration), "--warmup", str(cfg.warmup),
        "--timeout", str(cfg.timeout),
    ])  # fmt: skip
    for name, pgid in groups.items():
        argv += ["--watch", f"{name}={pgid}"]
    for name, value in target.extra_headers.items():
        argv += ["--header", f"{name}={value}"]
    env = clean_env(BENCH_AUTH=target.auth)
    out = run_captured(children, "loadgen", argv, env, cfg.warmup + cfg.duration + cfg.timeout + 60)
    result = json.loads(out.strip().splitlines()[-1])
    result.update(target=target.name, mode="stream" if stream else "json", rate=rate)
    result["passed"] = result["errors"] == 0 and result["achieved"] >= SUSTAIN_FRACTION * rate
    ttlb = result["ttlb_ms"] or {}
    log(
        f"{target.name:13s} {result['mode']:6s} {rate:6.0f} RPS: achieved {result['achieved']:7.1f}, "
        f"errors {result['errors']}, P50 {ttlb.get('p50', float('nan')):7.2f} ms, "
        f"P99 {ttlb.get('p99', float('nan')):8.2f} ms, "
        f"server CPU {result['cpu_s'].get(target.name, 0):.2f}s, "
        f"machine {result['machine_busy_pct']:.0f}% busy (others {result['others_busy_pct']:.0f}%)"
        + ("" if result["passed"] else "  -> NOT sustained")
    )
    return result


def run_closed(
    children: Children,
    target: Target,
    groups: dict[str, int],
    stream: bool,
    connections: int,
    cfg: Settings,
) -> dict[str, Any]:
    """Capacity as wrk measures it: ``connections`` clients each sending its next request when its last
    is answered; calls/s completed in the measured window and the server's CPU per call."""
    settle(groups)
    # In a closed loop a call waits behind connections / capacity others: 256 on a 50 calls/s floor is 5 s
    # at the median. A client timeout there would count the queue as errors, not as the capacity it is.
    timeout = max(cfg.timeout, CLOSED_TIMEOUT_S)
    argv = pinned("rest", [
        sys.executable, "-m", "bench.gateway_overhead", "_load", "--closed",
        "--connections", str(connections),
        "--url", target.base_url, "--model", target.model, "--stream", str(int(stream)),
        "--duration", str(cfg.duration), "--warmup", str(cfg.warmup), "--timeout", str(timeout),
    ])  # fmt: skip
    for name, pgid in groups.items():
        argv += ["--watch", f"{name}={pgid}"]
    for name, value in target.extra_headers.items():
        argv += ["--header", f"{name}={value}"]
    env = clean_env(BENCH_AUTH=target.auth)
    out = run_captured(children, "loadgen", argv, env, cfg.warmup + 2 * cfg.duration + 2 * timeout + 60)
    result = json.loads(out.strip().splitlines()[-1])
    result.update(target=target.name, mode="stream" if stream else "json")
    cpu_s = result["cpu_s"].get(target.name, 0.0)
    result["cpu_ms_per_call"] = cpu_s * 1000 / result["ok"] if result["ok"] else None
    ttlb = result["ttlb_ms"] or {}
    log(
        f"{target.name:13s} {result['mode']:6s} {connections:4d} connections: {result['achieved']:7.1f} "
        f"calls/s, errors {result['errors']}, P50 {ttlb.get('p50', float('nan')):7.2f} ms, server CPU "
        f"{result['cpu_ms_per_call'] or float('nan'):.3f} ms/call, "
        f"machine {result['machine_busy_pct']:.0f}% busy "
        f"(others {result['others_busy_pct']:.0f}%)"
    )
    return result


def capacity_search(
    children: Children,
    target: Target,
    groups: dict[str, int],
    stream: bool,
    steps: list[float],
    cfg: Settings,
    known: dict[tuple[str, str, float], dict[str, Any]],
) -> dict[str, Any]:
    """The highest step sustained, starting from what the fixed rates already showed.

    Upwards from the highest rate known to pass until one fails, or, when none passed yet,
    downwards from the lowest failure until one passes.
    """
    mode = "stream" if stream else "json"

    def at(rate: float) -> dict[str, Any]:
        if (target.name, mode, rate) not in known:
            known[(target.name, mode, rate)] = run_point(children, target, groups, stream, rate, cfg)
        return known[(target.name, mode, rate)]

    rates = sorted({*steps, *(r for (name, m, r) in known if name == target.name and m == mode)})
    tried = {r: known[(target.name, mode, r)] for r in rates if (target.name, mode, r) in known}
    best_rate = max((r for r, res in tried.items() if res["passed"]), default=None)
    fail_rate = min(
        (r for r, res in tried.items() if not res["passed"] and r > (best_rate or 0)), default=None
    )
    best = tried[best_rate] if best_rate is not None else None
    failed = tried[fail_rate] if fail_rate is not None else None
    if best is None:
        for rate in reversed([r for r in rates if fail_rate is None or r < fail_rate]):
            result = at(rate)
            if result["passed"]:
                best = result
                break
            failed = result
    else:
        for rate in [r for r in rates if r > best["rate"] and (fail_rate is None or r < fail_rate)]:
            result = at(rate)
            if not result["passed"]:
                failed = result
                break
            best = result
    return {"target": target.name, "mode": mode, "best": best, "failed": failed, "cap": rates[-1]}
