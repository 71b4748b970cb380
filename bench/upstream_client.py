"""Which HTTP client calls the upstream: candidate clients (bench/upstream_candidates.py) against the stub.

The OpenAI stub (bench/support/openai_stub.py) runs in its own process, pinned to one core
(``taskset -c 1``); each candidate runs in a child process pinned to the other (``taskset -c 0``) on
uvloop, as under uvicorn, so the child's CPU time (``time.process_time``, every thread of it: a Rust
client's runtime threads count) is the client's alone. A point is ``--calls`` calls kept
``--in-flight`` at a time by as many workers, after ``--warmup`` calls: JSON answers read whole, and
streams (one SSE event per word, ``--words``) read to their end. Every candidate is run ``--repeat``
times in turn; the table gives the median and the spread (min-max). ``gateway`` is Skillgate's own
call (routing/call/upstream.py), answers parsed. On a shared machine the stub's core is the ceiling
of calls/s; CPU ms per call is the client's own number, and its change from 16 to 256 in flight is the
pool's cost growing with connections.

    .venv/bin/python -m bench.upstream_client                       # ~4 min
    .venv/bin/python -m bench.upstream_client --out bench/results/upstream_client.md   # and its .json
    .venv/bin/python -m bench.upstream_client --render bench/results/upstream_client.json
    .venv/bin/python -m bench.upstream_client --clients httpx,aiohttp --repeat 1 --calls 500

pyreqwest, wreq and curl_cffi are not the project's dependencies; to measure them, install them beside
the venv (``pip install --no-deps --target DIR pyreqwest wreq curl-cffi``) and run with
``PYTHONPATH=DIR`` (the report names the versions it found).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from bench.upstream_candidates import CANDIDATES, Made, PoolClock, installed, pool_clock

STUB = """
import sys
from aiohttp import web
from bench.support.openai_stub import OpenAIStub, Reply
words = int(sys.argv[2])
stub = OpenAIStub(responder=lambda body: Reply(content=" ".join(["word"] * words)))
stub.requests = type("Forget", (list,), {"append": lambda self, item: None})()
stub.authorizations = stub.requests
web.run_app(stub.app(), host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""
KINDS = ("json", "stream")
PACKAGES = {"httpx": "httpx", "aiohttp": "aiohttp", "pyreqwest": "pyreqwest", "wreq": "wreq"}
PACKAGES |= {"curl_cffi": "curl_cffi", "gateway": "aiohttp"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pinned(core: int) -> list[str]:
    """``taskset -c CORE`` where there are two cores or more and taskset exists; else nothing."""
    if (os.cpu_count() or 1) > 1 and shutil.which("taskset"):
        return ["taskset", "-c", str(core)]
    return []


@contextmanager
def stub_process(words: int) -> Iterator[str]:
    port = _free_port()
    argv = [*_pinned(1), sys.executable, "-c", STUB, str(port), str(words)]
    child = subprocess.Popen(argv, start_new_session=True)
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
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        child.terminate()
        child.wait(10)


# --- the child: one candidate, every point --------------------------------------------------------


async def _point(
    call: object, calls: int, in_flight: int, pool: PoolClock | None
) -> tuple[float, float, float | None]:
    """(CPU ms per call, calls/s, pool µs per call) of ``calls`` calls, ``in_flight`` at a time."""
    left = calls

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await call()  # type: ignore[operator]

    pool_ns = pool.ns if pool is not None else 0
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    elapsed = time.perf_counter() - wall
    pool_us = (pool.ns - pool_ns) / 1000 / calls if pool is not None else None
    return (time.process_time() - cpu) * 1000 / calls, calls / elapsed, pool_us


async def _child(
    name: str, make: Callable[[str], Awaitable[Made]], url: str, calls: int, warmup: int, flights: list[int]
) -> list[dict[str, object]]:
    whole, streamed, close = await make(url)
    pool = pool_clock(name)
    rows: list[dict[str, object]] = []
    try:
        for kind, call in (("json", whole), ("stream", streamed)):
            for in_flight in flights:
                await _point(call, warmup, in_flight, pool)
                cpu_ms, per_s, pool_us = await _point(call, calls, in_flight, pool)
                row = {"kind": kind, "in_flight": in_flight, "cpu_ms": cpu_ms, "per_s": per_s}
                rows.append({**row, "pool_us": pool_us})
    finally:
        await close()
    return rows


def child_main(args: argparse.Namespace, make: Callable[[str], Awaitable[Made]] | None) -> None:
    import uvloop

    make = make or CANDIDATES[args.child][1]
    if make is None:
        raise SystemExit(f"{args.child} runs as python -m bench.upstream_gateway")
    flights = [int(x) for x in args.in_flight.split(",")]
    rows = uvloop.run(_child(args.child, make, args.url, args.calls, args.warmup, flights))
    print(json.dumps(rows))


# --- the parent: the stub, every candidate, the table ---------------------------------------------


def _run_child(name: str, url: str, args: argparse.Namespace) -> list[dict[str, object]]:
    module = "bench.upstream_gateway" if name == "gateway" else "bench.upstream_client"
    argv = [*_pinned(0), sys.executable, "-m", module, "--child", name, "--url", url]
    argv += ["--calls", str(args.calls), "--warmup", str(args.warmup), "--in-flight", args.in_flight]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    rows: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return rows


def _version(name: str) -> str:
    try:
        return version(PACKAGES[name])
    except PackageNotFoundError:
        return "?"


def _spread(values: list[float], digits: int) -> str:
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:.{digits}f}"
    return f"{median:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def _values(points: list[dict[str, object]], key: str) -> list[float]:
    return [float(p[key]) for p in points if p.get(key) is not None]  # type: ignore[arg-type]


def _growth(high: list[float], low: list[float]) -> str:
    if not high or not low or not statistics.median(low):
        return "-"
    return f"{statistics.median(high) / statistics.median(low) - 1:+.0%}"


def table(results: dict[str, list[list[dict[str, object]]]], flights: list[int]) -> list[str]:
    """One row per candidate, kind and in-flight count: CPU ms/call, calls/s and the pool's own CPU
    µs/call, median (spread); then their growth from the least to the most in flight."""
    lines = [
        "| client | kind | in flight | CPU ms/call | calls/s | pool CPU µs/call |",
        "|---|---|---:|---:|---:|---:|",
    ]
    growth = [
        "",
        f"Growth from {flights[0]} to {flights[-1]} in flight (medians):",
        "",
        "| client | kind | CPU ms/call | calls/s | pool CPU µs/call |",
        "|---|---|---:|---:|---:|",
    ]
    for name, runs in results.items():
        for kind in KINDS:
            found: dict[int, list[dict[str, object]]] = {}
            for in_flight in flights:
                points = [r for run in runs for r in run if r["kind"] == kind and r["in_flight"] == in_flight]
                found[in_flight] = points
                cpu, rate, pool = (_values(points, key) for key in ("cpu_ms", "per_s", "pool_us"))
                numbers = [_spread(cpu, 3), _spread(rate, 0), _spread(pool, 1) if pool else "-"]
                lines.append(f"| {name} | {kind} | {in_flight} | {' | '.join(numbers)} |")
            low, high = found[flights[0]], found[flights[-1]]
            parts = [_growth(_values(high, key), _values(low, key)) for key in ("cpu_ms", "per_s", "pool_us")]
            growth.append(f"| {name} | {kind} | {' | '.join(parts)} |")
    return lines + growth


CHOICE = """\
**The choice: aiohttp** (routing/call/http/). httpx's CPU per call is mostly its pool: httpcore's
``_assign_requests_to_connections`` runs per request and per release and scans every connection and
request, so its cost grows with the connections (the pool column); aiohttp's pool is a deque per host
(``_get``/``_release``), a few µs per call at any count. The compiled clients (pyreqwest, wreq: Rust
reqwest/hyper) use less CPU still, but pyreqwest 0.15.1 showed two faults for a gateway here: a
streamed answer's head is handed over only once its read buffer fills or the body ends (a whole SSE
stream, unless ``streamed_read_buffer_limit(0)``), and a read timeout while waiting for the answer's
head is reported as ``ConnectTimeoutError``, which would make a billed attempt look free
(routing/call/attempts.py). aiohttp is already installed (the stub, litellm), names connect and read
timeouts apart, closes the connection of a cancelled request or an answer not read to its end, and
runs on the server's own loop. The gateway row is Skillgate's own call on it, answers parsed."""


def summary(results: dict[str, list[list[dict[str, object]]]], flights: list[int]) -> list[str]:
    """httpx's CPU per call and pool cost against each other candidate's, from the medians."""

    def median(name: str, kind: str, in_flight: int, key: str) -> float | None:
        points = [r for run in results.get(name, []) for r in run if r["kind"] == kind]
        values = _values([p for p in points if p["in_flight"] == in_flight], key)
        return statistics.median(values) if values else None

    lines = ["", "httpx against the others (median CPU per call, x times the other's):", ""]
    for kind in KINDS:
        for in_flight in flights:
            base = median("httpx", kind, in_flight, "cpu_ms")
            if base is None:
                continue
            others = [
                f"{name} {base / found:.1f}x"
                for name in results
                if name != "httpx" and (found := median(name, kind, in_flight, "cpu_ms"))
            ]
            pools = [median(name, kind, in_flight, "pool_us") for name in ("httpx", "aiohttp")]
            pool = f"; pool {pools[0]:.0f} vs {pools[1]:.0f} µs" if None not in pools else ""
            lines.append(f"- {kind}, {in_flight} in flight: {', '.join(others)}{pool}")
    return [*lines, "", CHOICE]


def render(meta: dict[str, object], results: dict[str, list[list[dict[str, object]]]]) -> str:
    flights = [int(x) for x in str(meta["in_flight"]).split(",")]
    head = [
        "# Upstream client: candidates against the stub",
        "",
        f"Generated by `python -m bench.upstream_client {meta['command']}` in {meta['seconds']} s:"
        f" {meta['calls']} calls a point after {meta['warmup']} warm-up, answers of {meta['words']}"
        f" words (a stream: {int(str(meta['words'])) + 3} events), {meta['repeat']} runs of each client in"
        f" turn, median (min-max). {meta['where']}; {meta['versions']}. Raw points:"
        " `upstream_client.json` beside this page (`--render` it again).",
        "",
    ]
    if meta.get("missing"):
        head += [f"Not installed, not measured: {meta['missing']}.", ""]
    return "\n".join(head + table(results, flights) + summary(results, flights)) + "\n"


def main(argv: list[str] | None = None, make: Callable[[str], Awaitable[Made]] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", default=",".join(CANDIDATES), help="candidates, comma-separated")
    parser.add_argument("--calls", type=int, default=3000, help="calls per point (default 3000)")
    parser.add_argument("--warmup", type=int, default=300, help="calls before each point")
    parser.add_argument("--in-flight", default="16,256", help="calls in flight per point (default 16,256)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of every candidate, in turn")
    parser.add_argument("--words", type=int, default=20, help="words per answer (a stream: an event each)")
    parser.add_argument("--out", type=Path, help="also write the report (markdown) here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--render", type=Path, help="print (and --out) the report of a saved .json")
    args = parser.parse_args(argv)
    if args.child:
        child_main(args, make)
        return
    if args.render:
        saved = json.loads(args.render.read_text())
        text = render(saved["meta"], saved["results"])
        print(text)
        if args.out:
            args.out.write_text(text)
        return
    names = [name for name in args.clients.split(",") if name]
    unknown = sorted(set(names) - set(CANDIDATES))
    if unknown:
        parser.error(f"unknown client(s): {', '.join(unknown)}; known: {', '.join(CANDIDATES)}")
    missing = [name for name in names if not installed(name)]
    names = [name for name in names if name not in missing]
    started = time.perf_counter()
    results: dict[str, list[list[dict[str, object]]]] = {name: [] for name in names}
    with stub_process(args.words) as url:
        for _ in range(args.repeat):
            for name in names:
                results[name].append(_run_child(name, url, args))
    pinned = "" if _pinned(0) else " (not pinned: one core or no taskset)"
    meta = {
        "command": " ".join(argv if argv is not None else sys.argv[1:]),
        "seconds": round(time.perf_counter() - started),
        "calls": args.calls,
        "warmup": args.warmup,
        "words": args.words,
        "repeat": args.repeat,
        "in_flight": args.in_flight,
        "where": f"Client pinned to core 0 on uvloop, the stub (one aiohttp process) to core 1{pinned};"
        f" Python {platform.python_version()}, {os.cpu_count()} CPUs",
        "versions": ", ".join(f"{name} {_version(name)}" for name in names if name != "gateway"),
        "missing": ", ".join(missing),
    }
    text = render(meta, results)
    print(text)
    if args.out:
        args.out.write_text(text)
        raw = {"meta": meta, "results": results}
        args.out.with_suffix(".json").write_text(json.dumps(raw, indent=1) + "\n")


if __name__ == "__main__":
    main()
