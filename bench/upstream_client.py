"""Micro-benchmark: one upstream call through litellm vs the direct client (routing/call/openai_client.py).

The OpenAI stub (bench/support/openai_stub.py) runs in its own process, so this process's CPU time
(``time.process_time``) is the client's alone. Each path makes the same calls through the gateway's
own ``routing.call.upstream.complete`` / ``open_stream`` (the stream read to its end): sequential, then
``--concurrency`` at a time, after a few warm-up calls. Prints one markdown table; a test it is not.
Under concurrency the stub (one aiohttp process) is the bottleneck: latencies there are mostly its
queue, and a faster client queues more at it; CPU ms per call is the client's own number.

    .venv/bin/python -m bench.upstream_client                  # ~30 s
    .venv/bin/python -m bench.upstream_client --calls 500 --concurrency 32 --words 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

from django.conf import settings
from django.test import override_settings

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from routing.call import upstream
from routing.models import Backend

STUB = """
import sys
from aiohttp import web
from bench.support.openai_stub import OpenAIStub, Reply
words = int(sys.argv[2])
stub = OpenAIStub(responder=lambda body: Reply(content=" ".join(["word"] * words)))
web.run_app(stub.app(), host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


@dataclass
class Row:
    path: str
    kind: str
    mode: str
    calls: int
    cpu_ms: float
    per_s: float
    p50_ms: float
    p99_ms: float


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def stub_process(words: int) -> Iterator[str]:
    port = _free_port()
    child = subprocess.Popen([sys.executable, "-c", STUB, str(port), str(words)], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or child.poll() is not None:
                    raise RuntimeError("the stub did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        child.terminate()
        child.wait(10)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _measure(
    call: Callable[[], Awaitable[Any]], calls: int, concurrency: int
) -> tuple[float, float, list[float]]:
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            started = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - started) * 1000)

    cpu, wall = time.process_time(), time.perf_counter()
    if concurrency == 1:
        for _ in range(calls):
            await one()
    else:
        await asyncio.gather(*(one() for _ in range(calls)))
    per_s = calls / (time.perf_counter() - wall)
    return (time.process_time() - cpu) * 1000 / calls, per_s, latencies


def run_path(path: str, base_url: str, args: argparse.Namespace) -> list[Row]:
    backend = Backend(name="bench", role=Backend.Role.TEACHER, model="openai/bench-model", api_base=base_url)
    body = {"messages": [{"role": "user", "content": "Say a few words."}], "max_tokens": 64}

    async def whole() -> None:
        await upstream.complete(backend, body)

    async def streamed() -> None:
        async for _ in await upstream.open_stream(backend, body):
            pass

    async def main() -> list[Row]:
        rows = []
        for kind, call in (("json", whole), ("stream", streamed)):
            for _ in range(args.warmup):
                await call()
            for mode, concurrency in (
                ("sequential", 1),
                (f"concurrent x{args.concurrency}", args.concurrency),
            ):
                cpu_ms, per_s, latencies = await _measure(call, args.calls, concurrency)
                p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
                rows.append(Row(path, kind, mode, args.calls, cpu_ms, per_s, p50, p99))
        return rows

    with override_settings(SKILLGATE={**settings.SKILLGATE, "DIRECT_CLIENT": path == "direct"}):
        return asyncio.run(main())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200, help="calls per point (default 200)")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight, concurrent mode")
    parser.add_argument("--warmup", type=int, default=20, help="calls before each path's points")
    parser.add_argument("--words", type=int, default=20, help="words per answer (a stream: a chunk each)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with stub_process(args.words) as base_url:
        rows = run_path("direct", base_url, args) + run_path("litellm", base_url, args)  # direct first
    print(
        f"upstream client: {args.calls} calls a point, answers of {args.words} words,"
        " the stub in its own process;"
        f" Python {platform.python_version()}, litellm {version('litellm')}, orjson {version('orjson')},"
        f" {os.cpu_count()} CPUs; {time.perf_counter() - started:.0f} s\n"
    )
    print("| kind | mode | path | CPU ms/call | calls/s | P50 ms | P99 ms |")
    print("|---|---|---|---:|---:|---:|---:|")
    for row in sorted(rows, key=lambda r: (r.kind, r.mode, r.path)):
        numbers = f"{row.cpu_ms:.2f} | {row.per_s:.0f} | {row.p50_ms:.2f} | {row.p99_ms:.2f}"
        print(f"| {row.kind} | {row.mode} | {row.path} | {numbers} |")
    for kind in ("json", "stream"):
        cpu = {r.path: r.cpu_ms for r in rows if r.kind == kind and r.mode == "sequential"}
        ratio = cpu["litellm"] / cpu["direct"] if cpu["direct"] else float("nan")
        print(
            f"\n{kind}, sequential: litellm {cpu['litellm']:.2f} vs direct {cpu['direct']:.2f} CPU ms/call",
            end="",
        )
        print(f" ({ratio:.1f}x, {cpu['litellm'] - cpu['direct']:.2f} ms saved per call)")


if __name__ == "__main__":
    main()
