"""The open-loop load generator: runs as its own process (``python -m bench.gateway_overhead _load``),
starts requests on a fixed schedule whatever earlier ones are doing, and prints one JSON result."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bench.gateway_overhead.common import CLK_TCK, DONE, EXPECTED, NumberedBodies, cpu_snapshot


def percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)

    def rank(p: float) -> float:
        index = max(0, min(len(ordered) - 1, int(-(-p * len(ordered) // 100)) - 1))
        return ordered[index]

    return {"p50": rank(50), "p95": rank(95), "p99": rank(99), "max": ordered[-1]}


@dataclass
class Sample:
    intended: float
    sent: float
    done: float
    ttfb: float | None
    ok: bool
    error: str
    overhead_ms: float | None


async def _one(
    session: Any, url: str, body: bytes, headers: dict[str, str], stream: bool, intended: float
) -> Sample:
    import aiohttp

    clock = time.perf_counter
    sent = clock()
    ttfb: float | None = None
    error = ""
    overhead: float | None = None
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            header = resp.headers.get("x-skillgate-overhead-ms")
            overhead = float(header) if header else None
            if stream:
                tail = b""
                bad = False
                async for chunk in resp.content.iter_any():
                    if ttfb is None:
                        ttfb = clock()
                    bad = bad or b'"error"' in chunk
                    tail = (tail + chunk)[-len(DONE) :]
                if resp.status != 200:
                    error = f"HTTP {resp.status}"
                elif bad:
                    error = "error event in stream"
                elif tail != DONE:
                    error = "stream ended without [DONE]"
            else:
                data = await resp.read()
                if resp.status != 200:
                    error = f"HTTP {resp.status}: {data[:120].decode(errors='replace')}"
                elif f'"{EXPECTED}"'.encode() not in data:
                    error = "answer without the stub's content"
    except TimeoutError:
        error = "client timeout"
    except aiohttp.ClientError as exc:
        error = f"{type(exc).__name__}: {str(exc)[:80]}"
    return Sample(intended, sent, clock(), ttfb, not error, error, overhead)


async def _generate(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    stream = bool(args.stream)
    url = args.url.rstrip("/") + "/chat/completions"
    body = NumberedBodies(args.model, stream)
    headers = {"Content-Type": "application/json"}
    if os.environ.get("BENCH_AUTH"):
        headers["Authorization"] = f"Bearer {os.environ['BENCH_AUTH']}"
    headers.update(item.split("=", 1) for item in args.header)
    groups = {name: int(pgid) for name, pgid in (item.split("=") for item in args.watch)}
    rate, warmup, duration = args.rate, args.warmup, args.duration
    count = max(1, round(rate * (warmup + duration)))
    connector = aiohttp.TCPConnector(limit=args.connections, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    clock = time.perf_counter
    tasks: list[asyncio.Task[Sample]] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        start = clock() + 0.05
        window = (start + warmup, start + warmup + duration)
        before: dict[str, Any] | None = None
        after: dict[str, Any] | None = None

        async def snapshot_at(moment: float) -> dict[str, Any]:
            await asyncio.sleep(max(0.0, moment - clock()))
            return await asyncio.to_thread(cpu_snapshot, groups)

        first_snap = asyncio.create_task(snapshot_at(window[0]))
        last_snap = asyncio.create_task(snapshot_at(window[1]))
        for i in range(count):
            intended = start + i / rate
            delay = intended - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(session, url, body(), headers, stream, intended)))
        samples = await asyncio.gather(*tasks)
        before, after = await first_snap, await last_snap
    usage = resource.getrusage(resource.RUSAGE_SELF)
    measured = [s for s in samples if s.intended >= window[0]]
    good = [s for s in measured if s.ok]
    completed_in_window = sum(1 for s in samples if s.ok and window[0] <= s.done <= window[1])
    errors = Counter(s.error for s in measured if not s.ok)
    warmup_errors = Counter(s.error for s in samples if s.intended < window[0] and not s.ok)
    busy = after["machine"][0] - before["machine"][0]
    total = after["machine"][1] - before["machine"][1]
    cpu = {name: after["groups"][name] - before["groups"][name] for name in groups}
    # two targets may be one process (Skillgate's two configurations): count each process once
    ours = sum({groups[name]: cpu[name] for name in groups}.values()) + after["self"] - before["self"]
    overheads = [s.overhead_ms for s in good if s.overhead_ms is not None]
    return {
        "offered": rate,
        "duration": duration,
        "sent": len(measured),
        "ok": len(good),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "warmup_errors": dict(warmup_errors),
        "achieved": completed_in_window / duration,
        "ttlb_ms": percentiles([(s.done - s.intended) * 1000 for s in good]),
        "ttfb_ms": percentiles([(s.ttfb - s.intended) * 1000 for s in good if s.ttfb is not None])
        if stream
        else None,
        "send_lag_ms": percentiles([(s.sent - s.intended) * 1000 for s in measured]),
        "skillgate_overhead_hdr_ms": percentiles(overheads),
        "cpu_s": cpu,
        "machine_busy_pct": 100.0 * busy / total if total else 0.0,
        # CPU used by processes that are not part of this benchmark (other work on the machine)
        "others_busy_pct": max(0.0, 100.0 * (busy / CLK_TCK - ours) / (total / CLK_TCK)) if total else 0.0,
        "generator_window_cpu_s": after["self"] - before["self"],
        "generator_cpu_s": usage.ru_utime + usage.ru_stime,
    }


async def _generate_closed(args: argparse.Namespace) -> dict[str, Any]:
    """Closed loop: ``args.connections`` clients, each sending its next request as soon as its last one is
    answered, for warm-up + duration; the capacity is what completes in the measured window."""
    import aiohttp

    stream = bool(args.stream)
    url = args.url.rstrip("/") + "/chat/completions"
    body = NumberedBodies(args.model, stream)
    headers = {"Content-Type": "application/json"}
    if os.environ.get("BENCH_AUTH"):
        headers["Authorization"] = f"Bearer {os.environ['BENCH_AUTH']}"
    headers.update(item.split("=", 1) for item in args.header)
    groups = {name: int(pgid) for name, pgid in (item.split("=") for item in args.watch)}
    clock = time.perf_counter
    connector = aiohttp.TCPConnector(limit=args.connections, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    samples: list[Sample] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        start = clock()
        window = (start + args.warmup, start + args.warmup + args.duration)

        async def client() -> None:
            while (now := clock()) < window[1]:
                samples.append(await _one(session, url, body(), headers, stream, now))

        async def snapshot_at(moment: float) -> dict[str, Any]:
            await asyncio.sleep(max(0.0, moment - clock()))
            return await asyncio.to_thread(cpu_snapshot, groups)

        snaps = [asyncio.create_task(snapshot_at(moment)) for moment in window]
        await asyncio.gather(*(client() for _ in range(args.connections)))
        before, after = await snaps[0], await snaps[1]
    in_window = [s for s in samples if window[0] <= s.done <= window[1]]
    good = [s for s in in_window if s.ok]
    errors = Counter(s.error for s in in_window if not s.ok)
    busy = after["machine"][0] - before["machine"][0]
    total = after["machine"][1] - before["machine"][1]
    cpu = {name: after["groups"][name] - before["groups"][name] for name in groups}
    ours = sum({groups[name]: cpu[name] for name in groups}.values()) + after["self"] - before["self"]
    return {
        "offered": None,
        "connections": args.connections,
        "duration": args.duration,
        "sent": len(in_window),
        "ok": len(good),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "warmup_errors": {},
        "achieved": len(good) / args.duration,
        "ttlb_ms": percentiles([(s.done - s.sent) * 1000 for s in good]),
        "ttfb_ms": percentiles([(s.ttfb - s.sent) * 1000 for s in good if s.ttfb is not None])
        if stream
        else None,
        "send_lag_ms": None,
        "skillgate_overhead_hdr_ms": percentiles([s.overhead_ms for s in good if s.overhead_ms is not None]),
        "cpu_s": cpu,
        "machine_busy_pct": 100.0 * busy / total if total else 0.0,
        "others_busy_pct": max(0.0, 100.0 * (busy / CLK_TCK - ours) / (total / CLK_TCK)) if total else 0.0,
        "generator_window_cpu_s": after["self"] - before["self"],
    }


def load_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="gateway_overhead _load")
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--stream", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.0, help="open loop: requests per second")
    parser.add_argument("--closed", action="store_true", help="closed loop over --connections clients")
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--warmup", type=float, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--watch", action="append", default=[], help="name=pgid, CPU counted in the window")
    parser.add_argument("--header", action="append", default=[], help="name=value, sent with every request")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    generate = _generate_closed if args.closed else _generate
    print(json.dumps(asyncio.run(generate(args))), flush=True)
