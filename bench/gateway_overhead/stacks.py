"""Which server and which upstream client (issue 42): ``python -m bench.gateway_overhead.stacks``.

Side by side in one run, each gateway pinned to CPU 0 and the stub and the load generator on the others,
closed loop at 16 and 256 connections, JSON and streams:

- the raw-ASGI floor (the body passed through) with httpx or aiohttp's client (floor.py, floor_aiohttp.py),
  each on the production server (``python -m app.serve``: uvicorn, uvloop, httptools, app/serve.py's
  protocol) and on granian (compiled, Rust; ``--interface asgi --loop uvloop``, one worker, one runtime
  thread);
- Skillgate's full configuration on both servers (one seeded database);
- the edge rules a server must keep (issue 37), probed on each server as Skillgate runs on it, with a
  2 s header deadline and a 64 KiB head bound: what a head that never ends gets, what a 100 KiB head gets.

It writes ``bench/results/gateway_overhead_stacks.md``. Needs granian (``.venv/bin/pip install granian``):
it is measured here, not a dependency of the service.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from bench.gateway_overhead.children import Children, clean_env, free_port, managed_children, pin, pinned
from bench.gateway_overhead.common import RESULTS, STUB_MODEL, WORK, BenchError, log
from bench.gateway_overhead.measure import Settings, run_closed
from bench.gateway_overhead.report import _version
from bench.gateway_overhead.servers import (
    Target,
    sanity_check,
    seed_skillgate,
    serve_argv,
    serve_skillgate,
    start_stub,
    wait_http_post,
)

HEADER_TIMEOUT_S = 2
HEAD_BOUND = 64 * 1024
CRLF = b"\r\n"
FLOORS = {"httpx": "bench.gateway_overhead.floor:app", "aiohttp": "bench.gateway_overhead.floor_aiohttp:app"}


def granian_argv(app: str, port: int, workers: int) -> list[str]:
    return pinned("gateway", [
        sys.executable, "-m", "granian", app, "--interface", "asgi", "--host", "127.0.0.1",
        "--port", str(port), "--http", "1", "--no-ws", "--loop", "uvloop", "--workers", str(workers),
        "--runtime-mode", "st", "--runtime-threads", "1", "--log-level", "warning",
        "--http1-header-read-timeout", str(HEADER_TIMEOUT_S * 1000), "--http1-buffer-size", str(HEAD_BOUND),
    ])  # fmt: skip


SERVERS = {"app.serve": serve_argv, "granian": granian_argv}


def probe(port: int) -> tuple[str, str]:
    """(what a head that stops half way gets, what a 100 KiB head gets) from the server on ``port``."""

    def exchange(data: bytes, wait_s: float) -> str:
        with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
            started = time.monotonic()
            try:
                sock.sendall(data)
            except OSError as exc:
                return f"{type(exc).__name__} while sending"
            try:
                answer = sock.recv(200)
            except TimeoutError:
                return f"nothing within {wait_s:g} s"
            except OSError as exc:
                return f"{type(exc).__name__} after {time.monotonic() - started:.1f} s"
            took = time.monotonic() - started
            if not answer:
                return f"closed without an answer after {took:.1f} s"
            status = answer.split(CRLF, 1)[0].decode(errors="replace")
            return f"{status} after {took:.1f} s"

    slow = exchange(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", HEADER_TIMEOUT_S + 5)
    big = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (100 * 1024) + b"\r\n\r\n"
    return slow, exchange(big, 10)


def start_floor_on(children: Children, stub: Target, server: str, client: str) -> Target:
    port, name = free_port(), f"floor-{client}@{server}"
    proc = children.start(
        name, SERVERS[server](FLOORS[client], port, 1), clean_env(FLOOR_UPSTREAM=stub.base_url)
    )
    base = f"http://127.0.0.1:{port}/v1"
    wait_http_post(f"{base}/chat/completions", proc, name, 30)
    return Target(name, base, STUB_MODEL, proc.pid)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_overhead.stacks", description=__doc__)
    parser.add_argument("--connections", default="16,256")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--database-url", default=None, help="as bench.gateway_overhead's")
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS.with_name("gateway_overhead_stacks.md"))
    args = parser.parse_args(argv)
    counts = sorted({int(c) for c in args.connections.split(",")})
    cfg = Settings(duration=args.duration, warmup=args.warmup, timeout=30.0)
    if args.nice:
        os.nice(args.nice)
    WORK.mkdir(parents=True, exist_ok=True)
    pin("0")
    rows: list[tuple[str, str, int, dict[str, Any]]] = []
    probes: dict[str, tuple[str, str]] = {}
    with managed_children() as children:
        stub = start_stub(children)
        targets = [start_floor_on(children, stub, server, client) for client in FLOORS for server in SERVERS]
        env, seed, db_label = seed_skillgate(
            children, stub, args.database_url, SKILLGATE_BODY_READ_TIMEOUT_S=str(HEADER_TIMEOUT_S)
        )
        for server, argv_of in SERVERS.items():
            full = serve_skillgate(children, env, seed, 1, argv_of, suffix=f"@{server}")[0]
            targets.append(full)
            probes[server] = probe(int(full.base_url.rsplit(":", 1)[1].split("/")[0]))
        for target in targets:
            sanity_check(target)
        groups = {t.name: t.pgid for t in targets}
        for stream in (False, True):
            for target in targets:
                for count in counts:
                    result = run_closed(children, target, groups, stream, count, cfg)
                    rows.append((target.name, result["mode"], count, result))
    write(args.output, rows, probes, counts, db_label)
    log(f"wrote {args.output}")


def write(
    path: Path,
    rows: list[tuple[str, str, int, dict[str, Any]]],
    probes: dict[str, tuple[str, str]],
    counts: list[int],
    db_label: str,
) -> None:
    table = [
        "| stack | mode | connections | calls/s | server CPU ms/call | P50 ms | errors |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, mode, count, r in rows:
        cpu = "–" if r["cpu_ms_per_call"] is None else f"{r['cpu_ms_per_call']:.3f}"
        p50 = (r["ttlb_ms"] or {}).get("p50")
        table.append(
            f"| {name} | {mode} | {count} | {r['achieved']:.1f} | {cpu} | "
            f"{'–' if p50 is None else f'{p50:.1f}'} | {r['errors']} |"
        )
    edge = ["| server | a head that stops half way | a 100 KiB head |", "|---|---|---|"]
    edge += [f"| {server} | {slow} | {big} |" for server, (slow, big) in probes.items()]
    py = Path(sys.executable)
    versions = ", ".join(
        f"{m} {_version(py, m)}" for m in ("uvicorn", "httptools", "uvloop", "granian", "aiohttp", "httpx")
    )
    text = [
        "# Server and upstream client candidates (`python -m bench.gateway_overhead.stacks`)",
        "",
        f"- Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}; {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}; commit {os.popen('git rev-parse --short HEAD').read().strip()}",
        f"- {versions}; Skillgate's database: {db_label}",
        f"- Command: `.venv/bin/python -m bench.gateway_overhead.stacks {' '.join(sys.argv[1:])}`",
        "- Each gateway on CPU 0, the stub and the closed-loop load generator on the others; "
        f"{counts} connections; `floor-<client>@<server>`: the raw-ASGI pass-through; "
        "`skillgate-full@<server>`: Skillgate with every feature on (budget, rate limit, learned router, "
        "student, verifier, ledger).",
        "",
        *table,
        "",
        f"The edge rules on each server (Skillgate, header deadline {HEADER_TIMEOUT_S} s, head bound "
        f"{HEAD_BOUND // 1024} KiB; the rule: a 408 and a 431 in the interface's error convention):",
        "",
        *edge,
        "",
    ]
    path.write_text("\n".join(text))


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        log(f"error: {exc}")
        sys.exit(1)
