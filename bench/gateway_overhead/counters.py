"""What grows with the connections, counted inside Skillgate's process: closed-loop points (default 16 and
256 connections, twice) against the full configuration served by ``bench.gateway_overhead.counted``, and
per call the upstream connections opened and the cyclic GC's collections and CPU time (main thread).

    .venv/bin/python -m bench.gateway_overhead _counters [--connections 16,256,16,256] [--stream]
        [--duration 6] [--env SKILLGATE_UPSTREAM_MAX_KEEPALIVE=100] [--env BENCH_GC_THRESHOLD=700,10,10]
        [--database-url postgres://.../x_bench]

Counts, unlike CPU per call, barely move with other work on the machine (issue 42: GC CPU per call and
upstream connections per call at 256 vs 16 connections)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.gateway_overhead.children import pin
from bench.gateway_overhead.common import WORK
from bench.gateway_overhead.measure import Settings, run_closed
from bench.gateway_overhead.servers import (
    managed_children,
    sanity_check,
    seed_skillgate,
    serve_argv,
    serve_skillgate,
    start_stub,
)

APP = "bench.gateway_overhead.counted:application"


def counters_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="gateway_overhead _counters")
    parser.add_argument("--connections", default="16,256,16,256")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for Skillgate's process")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    counts_file = WORK / "counters.json"
    counts_file.unlink(missing_ok=True)
    extra = dict(item.split("=", 1) for item in args.env)
    pin("0")
    cfg = Settings(duration=args.duration, warmup=args.warmup, timeout=10.0)
    rows = []
    with managed_children() as children:
        stub = start_stub(children)
        env, seed, _ = seed_skillgate(
            children, stub, args.database_url, BENCH_COUNTERS_FILE=str(counts_file), **extra
        )
        targets = serve_skillgate(children, env, seed, argv_of=lambda _app, port, n: serve_argv(APP, port, n))
        target = next(t for t in targets if t.name == "skillgate-full")
        sanity_check(target)
        for count in (int(c) for c in args.connections.split(",") if c.strip()):
            before = _read(counts_file)
            result = run_closed(children, target, {target.name: target.pgid}, args.stream, count, cfg)
            rows.append((count, result, _per_call(before, _read(counts_file))))
    print(table(rows, "stream" if args.stream else "json", args.env))


def _read(path: Any) -> dict[str, Any]:
    time.sleep(0.6)  # the server writes its counts twice a second
    return dict(json.loads(path.read_text()))


def _per_call(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    calls = max(1, after["calls"] - before["calls"])
    gc_cpu = [b - a for a, b in zip(before["gc_cpu_s"], after["gc_cpu_s"], strict=True)]
    gc_n = [b - a for a, b in zip(before["gc_n"], after["gc_n"], strict=True)]
    return {
        "calls": calls,
        "connections": (after["connections"] - before["connections"]) / calls,
        "gc_ms": 1000 * sum(gc_cpu) / calls,
        "gc_per_1000": [round(1000 * n / calls, 1) for n in gc_n],
    }


def table(rows: list[tuple[int, dict[str, Any], dict[str, Any]]], mode: str, env: list[str]) -> str:
    lines = [
        f"skillgate-full, {mode}, settings {' '.join(env) or '(defaults)'}",
        "| connections | calls/s | server CPU ms/call | calls counted | new upstream connections/call "
        "| GC CPU ms/call | GC collections per 1000 calls (gen 0/1/2) |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for count, result, per in rows:
        cpu = result["cpu_ms_per_call"] or float("nan")
        lines.append(
            f"| {count} | {result['achieved']:.1f} | {cpu:.3f} | {per['calls']} | {per['connections']:.3f} "
            f"| {per['gc_ms']:.3f} | {' / '.join(str(n) for n in per['gc_per_1000'])} |"
        )
    return "\n".join(lines)
