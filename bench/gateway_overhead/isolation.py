"""What isolating a verification costs (issue 37): ``python -m bench.gateway_overhead.isolation``.

Verifiers that are not trivially cheap run in worker processes (routing/verifiers/pool.py); the cheap
ones stay in the serving process. This measures, on the machine it runs on, one process:

- an inline check (a regex, a small schema) as the gateway runs it: ``run_verifier`` on the loop;
- one isolated verification of a tiny answer (a schema with a ``$ref``), awaited one at a time: the
  round trip to a worker (thread hop, the task as JSON through a pipe, the answer back);
- the same with 4 at once (the default pool's size), per verification;
- a worker's start until it is ready, and a deadline: the kill, the replacement, the ``error`` verdict.

It writes ``bench/results/gateway_overhead_isolation.md`` (``--output`` to change).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from bench.gateway_overhead.common import RESULTS
from core.conf import forget
from routing.verifiers import build_verifier
from routing.verifiers.pool import pool, run_verifier
from routing.verifiers.workers import WorkerProcess

REQUEST: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
ISOLATED = {"kind": "json_schema", "schema": {"$ref": "#/$defs/v", "$defs": {"v": {"type": "object"}}}}
CHEAP: dict[str, dict[str, Any]] = {
    "regex": {"kind": "regex", "pattern": "^ok$", "mode": "fullmatch"},
    "json_schema (small, no $ref)": {"kind": "json_schema", "schema": {"type": "object"}},
}
ANSWER = {"role": "assistant", "content": '{"a": 1}'}


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


async def _timed(
    config: dict[str, Any], message: dict[str, Any], n: int, concurrency: int = 1
) -> list[float]:
    verifier = build_verifier(config)
    samples: list[float] = []

    async def one() -> None:
        started = time.perf_counter()
        verdict = await run_verifier(verifier, REQUEST, message, owner=f"bench-{len(samples) % concurrency}")
        samples.append(time.perf_counter() - started)
        assert not verdict.error, verdict.detail

    for _ in range(n // concurrency):
        await asyncio.gather(*(one() for _ in range(concurrency)))
    return samples


def _startup(n: int) -> list[float]:
    took = []
    for _ in range(n):
        started = time.perf_counter()
        worker = WorkerProcess()
        worker.wait_ready()
        took.append(time.perf_counter() - started)
        worker.close()
    return took


async def _deadline() -> tuple[float, str]:
    settings.SKILLGATE = {**settings.SKILLGATE, "VERIFIER_TASK_TIMEOUT_S": 0.2}
    forget()  # set by hand, not by override_settings: the typed settings are read again
    costly = {
        "kind": "json_schema",
        "schema": {
            "type": "array",
            "items": {"$ref": "#/$defs/d0"},
            "$defs": {
                **{f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(14)},
                "d14": {"type": "object"},
            },
        },
    }
    started = time.perf_counter()
    verdict = await run_verifier(build_verifier(costly), REQUEST, {"content": json.dumps([{}] * 5000)})
    return time.perf_counter() - started, verdict.detail


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's live children (the pool's workers)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if int(fields[1]) == os.getpid():
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


async def _idle_cpu_ms(seconds: float) -> tuple[float, float]:
    """(this process's CPU ms, its children's CPU ms) over ``seconds`` of an idle event loop: what the
    pool costs the calls that never use it."""
    own, kids = time.process_time(), _children_cpu_s()
    await asyncio.sleep(seconds)
    return (time.process_time() - own) * 1e3, (_children_cpu_s() - kids) * 1e3


async def measure(n: int, idle_s: float = 5.0) -> list[str]:
    without_pool = await _idle_cpu_ms(idle_s)  # no isolated verification yet: no pool, no workers
    size = pool().size  # the workers start now, in parallel
    await _timed(ISOLATED, ANSWER, 20)  # warm: every worker ready
    with_pool = await _idle_cpu_ms(idle_s)
    rows = [
        f"Calls without a verifier never reach the pool (it starts on the first isolated verification). "
        f"What it costs them while it exists, {idle_s:g} s of an idle process, CPU:",
        "",
        "| the serving process | its own CPU | the workers' CPU |",
        "|---|---|---|",
        f"| no pool (no isolated verification yet) | {without_pool[0]:.1f} ms | {without_pool[1]:.1f} ms |",
        f"| the pool's {size} workers started, warm and idle | {with_pool[0]:.1f} ms "
        f"| {with_pool[1]:.1f} ms |",
        "",
        "What one verification costs, by where it runs:",
        "",
    ]
    rows += ["| check | where | P50 | P95 | per verification |", "|---|---|---|---|---|"]
    for name, config in CHEAP.items():
        p50, p95 = _percentiles(await _timed(config, {"role": "assistant", "content": "ok"}, n))
        cells = f"{p50 * 1e6:.1f} µs | {p95 * 1e6:.1f} µs"
        rows.append(f"| {name}, 2-byte answer | inline | {cells} | {p50 * 1e6:.1f} µs |")
    p50, p95 = _percentiles(await _timed(ISOLATED, ANSWER, n))
    rows.append(
        f"| json_schema with $ref, 8-byte answer, one at a time | worker process | {p50 * 1e3:.2f} ms | "
        f"{p95 * 1e3:.2f} ms | {p50 * 1e3:.2f} ms |"
    )
    started = time.perf_counter()
    together = await _timed(ISOLATED, ANSWER, n, concurrency=size)
    wall = time.perf_counter() - started
    p50, p95 = _percentiles(together)
    rows.append(
        f"| the same, {size} at once | worker process | {p50 * 1e3:.2f} ms | {p95 * 1e3:.2f} ms | "
        f"{wall / len(together) * 1e3:.2f} ms |"
    )
    p50, p95 = _percentiles(_startup(5))
    rows.append(
        f"| a worker's start (Popen to ready) | worker process | {p50 * 1e3:.0f} ms | {p95 * 1e3:.0f} ms | |"
    )
    took, detail = await _deadline()
    rows.append(
        f"| a 0.2 s deadline: kill, replace, verdict error | worker process | {took * 1e3:.0f} ms | | |"
    )
    rows.append("")
    rows.append(f"The deadline's verdict: {detail}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_overhead.isolation", description=__doc__)
    parser.add_argument("-n", type=int, default=400, help="verifications per row (default 400)")
    parser.add_argument("--output", type=Path, default=RESULTS.with_name("gateway_overhead_isolation.md"))
    args = parser.parse_args()
    rows = asyncio.run(measure(args.n))
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = os.popen("git rev-parse --short HEAD").read().strip()
    load = os.getloadavg()[0]
    head = [
        "# The cost of an isolated verification (`python -m bench.gateway_overhead.isolation`)",
        "",
        f"Measured {when} at {commit}, {os.cpu_count()} CPUs, load average {load:.1f} (a shared machine).",
        "",
    ]
    args.output.write_text("\n".join(head + rows) + "\n")
    print("\n".join(head + rows))


if __name__ == "__main__":
    main()
