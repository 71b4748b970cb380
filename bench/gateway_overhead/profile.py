"""Where Skillgate's time goes: py-spy samples the server while the load generator offers one rate.

    .venv/bin/python -m bench.gateway_overhead _profile [--target skillgate-full] [--rate 100]
        [--connections N] [--stream] [--duration 15] [--database-url postgres://.../skillgate_bench]

``--connections N`` offers a closed loop of N clients instead of ``--rate`` (as the capacity points do):
compare 16 with 256 to see where the CPU per call grows with the connections. ``--env NAME=VALUE``
(repeatable) sets a setting of Skillgate's process, e.g. ``SKILLGATE_UPSTREAM_MAX_KEEPALIVE=100`` to see
what a value costs.

Prints two tables from the samples of the server thread holding the GIL (Python work, not waits): the
functions where the time is spent (self) and the share of the samples each step of a call is under
(inclusive), and keeps the collapsed stacks in var/bench/profile-<target>-<mode>.txt (for flamegraph.pl
or speedscope).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from bench.gateway_overhead.common import WORK, BenchError, log
from bench.gateway_overhead.measure import Settings, run_closed, run_point
from bench.gateway_overhead.servers import managed_children, sanity_check, start_skillgate, start_stub

# Frames that are the event loop or a thread waiting, not work.
IDLE = ("select (selectors.py", "_run_once (asyncio", "wait (threading.py", "_worker (concurrent")
# Steps of a call, by the function that is their entry point (substring of the frame).
STEPS = {
    "ASGI server (uvicorn, httptools)": "uvicorn/protocols",
    "edge: parse + validate request": "parse_chat_request",
    "edge: authenticate": "api_key_of",
    "rate limit": "check_rate",
    "prepare: profile, plan, route": "prepare (routing/call/gateway.py",
    "router decision (features, model)": "aroute (routing/router/policies.py",
    "budget hold": "reserve_budget",
    "upstream call (httpx)": "routing/call/openai_client.py",
    "verification": "verify (routing/call/legs.py",
    "ledger save (journal)": "save (routing/call/gateway.py",
    "ledger writer thread": "ledger_writer.py",
    "response rendering": "send_json",
    "streaming": "send_stream",
}


def profile_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="gateway_overhead _profile")
    parser.add_argument("--target", default="skillgate-full", choices=("skillgate-full", "skillgate-cheap"))
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument(
        "--connections", type=int, default=0, help="a closed loop over N connections instead of --rate"
    )
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for Skillgate's process")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        raise BenchError("py-spy is not installed: .venv/bin/pip install py-spy")
    mode = "stream" if args.stream else "json"
    load = f"c{args.connections}" if args.connections else f"r{args.rate:g}"
    out = WORK / f"profile-{args.target}-{mode}-{load}.txt"
    WORK.mkdir(parents=True, exist_ok=True)
    with managed_children() as children:
        stub = start_stub(children)
        extra = dict(item.split("=", 1) for item in args.env)
        targets, db_label, _ = start_skillgate(children, stub, args.database_url, **extra)
        target = next(t for t in targets if t.name == args.target)
        sanity_check(target)
        cfg = Settings(duration=args.duration, warmup=2.0, timeout=10.0)
        record = [py_spy, "record", "--pid", str(target.pgid), "--rate", "250", "--format", "raw", "--gil"]
        record += ["--duration", str(int(args.duration)), "--nonblocking", "-o", str(out)]
        spy = threading.Timer(cfg.warmup, lambda: subprocess.run(record, capture_output=True, check=False))
        spy.start()
        groups = {target.name: target.pgid}
        if args.connections:
            result = run_closed(children, target, groups, args.stream, args.connections, cfg)
        else:
            result = run_point(children, target, groups, args.stream, args.rate, cfg)
        spy.join()
    cpu = result["cpu_s"].get(target.name, 0.0) * 1000 / max(1, result["ok"])
    log(
        f"{args.target} on {db_label}: {result['achieved']:.0f} calls/s achieved, {cpu:.3f} ms CPU per "
        f"call, stacks in {out}"
    )
    print(summarize(out.read_text(), args.top))


def summarize(collapsed: str, top: int) -> str:
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    busy = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        frames = stack.split(";")
        if any(idle in frames[-1] for idle in IDLE):
            continue
        count = int(count_text)
        busy += count
        own[frames[-1]] += count
        for step, marker in STEPS.items():
            if any(marker in frame for frame in frames):
                under[step] += count
    if not busy:
        return "no busy samples (is the server under load?)"
    rows = ["| step (inclusive) | share of busy samples |", "|---|---:|"]
    rows += [f"| {step} | {100 * n / busy:.1f}% |" for step, n in under.most_common()]
    rows += ["", "| function (self) | share of busy samples |", "|---|---:|"]
    rows += [f"| `{frame[:110]}` | {100 * n / busy:.1f}% |" for frame, n in own.most_common(top)]
    return "\n".join(rows)
