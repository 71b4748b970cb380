"""The results table and the markdown report (bench/results/gateway_overhead.md)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.gateway_overhead.common import BENCH_VENV, ROOT, SUSTAIN_FRACTION, TARGET_ORDER
from bench.gateway_overhead.measure import Settings


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _triple(stats: dict[str, float] | None, base: dict[str, float] | None, keys: tuple[str, ...]) -> str:
    if not stats or not base:
        return "–"
    return " / ".join(
        f"{stats[k] - base[k]:+.1f}" if abs(stats[k] - base[k]) >= 10 else f"{stats[k] - base[k]:+.2f}"
        for k in keys
    )


def _row(result: dict[str, Any], base: dict[str, Any] | None, rate_label: str) -> str:
    ttlb, ttfb = result.get("ttlb_ms"), result.get("ttfb_ms")
    direct = base is not None and result["target"] == "direct"
    added = "(baseline)" if direct else _triple(ttlb, base and base.get("ttlb_ms"), ("p50", "p95", "p99"))
    if result["mode"] == "stream":
        first = f"{_ms(ttfb and ttfb['p50'])} / {_ms(ttfb and ttfb['p99'])}" if ttfb else "–"
        added_first = "(baseline)" if direct else _triple(ttfb, base and base.get("ttfb_ms"), ("p50", "p99"))
    else:
        first = added_first = "–"
    answered = result["achieved"] * result["duration"] or result["offered"] * result["duration"]
    cpu = result["cpu_s"].get(result["target"], 0.0) * 1000 / answered
    errors = str(result["errors"])
    if result["errors"]:
        errors += " (" + "; ".join(f"{n}× {kind}" for kind, n in result["error_kinds"].items()) + ")"
    return (
        f"| {result['target']} | {result['mode']} | {rate_label} | {result['achieved']:.1f}"
        f"{'' if result['passed'] else ' ✗'} | {errors} | "
        f"{_ms(ttlb and ttlb['p50'])} | {_ms(ttlb and ttlb['p95'])} | {_ms(ttlb and ttlb['p99'])} | "
        f"{added} | "
        f"{first} | {added_first} | {cpu:.2f} | {result['machine_busy_pct']:.0f} "
        f"({result['others_busy_pct']:.0f}) |"
    )


HEADER = (
    "| target | mode | offered RPS | achieved RPS | errors | P50 ms | P95 ms | P99 ms "
    "| added P50 / P95 / P99 ms | TTFB P50 / P99 ms | added TTFB P50 / P99 ms "
    "| server CPU ms/req | machine CPU % (others) |\n"
    "|---|---|---:|---:|---|---:|---:|---:|---|---|---|---:|---:|"
)


def render_table(
    fixed: list[dict[str, Any]], searches: list[dict[str, Any]], known: dict[tuple[str, str, float], Any]
) -> str:
    rows = [HEADER]
    order = {name: i for i, name in enumerate(TARGET_ORDER)}
    for mode in ("json", "stream"):
        points = sorted(
            (r for r in fixed if r["mode"] == mode), key=lambda r: (r["rate"], order[r["target"]])
        )
        for result in points:
            base = known.get(("direct", mode, result["rate"]))
            rows.append(_row(result, base, f"{result['rate']:.0f}"))
        for search in sorted((s for s in searches if s["mode"] == mode), key=lambda s: order[s["target"]]):
            best = search["best"]
            if best is None:
                first = search["failed"]
                label = f"**max < {first['rate']:.0f}**"
                rows.append(_row(first, known.get(("direct", mode, first["rate"])), label))
                continue
            label = f"**max {best['rate']:.0f}**" if search["failed"] else f"**max ≥ {best['rate']:.0f}**"
            rows.append(_row(best, known.get(("direct", mode, best["rate"])), label))
    return "\n".join(rows)


def search_log(searches: list[dict[str, Any]], known: dict[tuple[str, str, float], Any]) -> list[str]:
    lines = []
    for search in searches:
        steps = sorted(
            (
                r
                for (name, mode, _), r in known.items()
                if name == search["target"] and mode == search["mode"]
            ),
            key=lambda r: r["rate"],
        )
        parts = []
        for r in steps:
            verdict = "ok" if r["passed"] else "FAIL"
            p99 = (r["ttlb_ms"] or {}).get("p99")
            parts.append(
                f"{r['rate']:.0f}: {verdict} (achieved {r['achieved']:.1f}, {r['errors']} errors, "
                f"P99 {_ms(p99)} ms)"
            )
        lines.append(f"- {search['target']} / {search['mode']}: " + "; ".join(parts))
    return lines


def _version(python: Path, module: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({module!r}))"
    try:
        return subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return "n/a"


def environment_lines(
    db_label: str, with_proxy: bool, workers: int = 1, router: dict[str, Any] | None = None
) -> list[str]:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    with open("/proc/meminfo") as fh:
        mem_gib = int(fh.readline().split()[1]) / 1024 / 1024
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "routing", "app"], cwd=ROOT, capture_output=True, text=True
    )
    py = Path(sys.executable)
    versions = ", ".join(
        f"{m} {_version(py, m)}"
        for m in ("django", "uvicorn", "uvloop", "httptools", "litellm", "aiohttp", "httpx", "granian")
    )
    lines = [
        f"- Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {cpu}, {os.cpu_count()} CPUs, {mem_gib:.0f} GiB RAM, {platform.platform()}",
        f"- Code: commit {commit.stdout.strip() or '?'}"
        + (" (routing/ or app/ modified)" if dirty.stdout.strip() else " (routing/ and app/ clean)"),
        f"- Python {platform.python_version()}; gateway venv: {versions}",
        f"- Skillgate database: {db_label}",
        f"- Server processes of each gateway: {workers} (`python -m app.serve` each on its SO_REUSEPORT "
        "socket for Skillgate and floor-aiohttp; `uvicorn --workers` for the floor)",
        f"- Full configuration's router version: {router or '–'}",
        f"- Niceness of the benchmark's processes: {os.nice(0)}",
    ]
    if with_proxy:
        bench_py = BENCH_VENV / "bin" / "python"
        proxy_versions = ", ".join(
            f"{m} {_version(bench_py, m)}" for m in ("litellm", "fastapi", "uvicorn", "uvloop")
        )
        lines.append(f"- LiteLLM proxy venv (var/bench-venv): {proxy_versions}")
    return lines


def write_report(
    path: Path,
    args: argparse.Namespace,
    cfg: Settings,
    env_lines: list[str],
    table: str,
    searches: list[str],
    errors: list[str],
    sections: tuple[list[str], list[str]] = ([], []),
) -> None:
    closed, checks = sections
    command = ".venv/bin/python -m bench.gateway_overhead " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    text = "\n".join(
        [
            "# Gateway overhead: direct vs the floors vs Skillgate vs LiteLLM proxy",
            "",
            *env_lines,
            f"- Command: `{command.strip()}`",
            f"- Per point: {cfg.warmup:g} s warm-up (discarded), then {cfg.duration:g} s measured; "
            f"client timeout {cfg.timeout:g} s; rates {args.rates}; search steps {args.search_steps}",
            "",
            *(
                ["## Issue 42's checks (computed from the points below)", "", *checks, ""]
                if checks and closed
                else []
            ),
            *(
                [
                    "## Closed loop: capacity and CPU per call by connection count",
                    "",
                    "Each connection sends its next call as soon as its last one is answered (as wrk does); "
                    "calls/s are the calls completed in the measured window, CPU the server's in it.",
                    "",
                    *closed,
                    "",
                ]
                if closed
                else []
            ),
            "## Open loop: fixed rates and the capacity search",
            "",
            "Method: one stub upstream (`bench/support/openai_stub.py`, aiohttp, answers `ok` at once); the "
            "**floor** (`bench/gateway_overhead/floor.py`: raw ASGI + one pooled httpx client on plain "
            "uvicorn, the body passed through, no parsing: today's floor in issue 42); **floor-aiohttp** "
            "(`floor_aiohttp.py`: the same with aiohttp's pooled client, on `python -m app.serve`, the "
            "production server); one Skillgate (`python -m app.serve`, ledger writer `batched`) "
            "reached as two targets: **skillgate-full** (a key with a budget and a rate limit, both checked "
            "on every call; a `learned` profile whose active router version decides each call, embedding "
            "included; the student leg on the stub; a regex verifier that passes; the ledger row) and "
            "**skillgate-cheap** (a key with neither, the default profile: always the teacher, nothing to "
            "verify); one LiteLLM proxy (`litellm --config`, `--num_workers 1`, no database, no master key, "
            "logging off, LITELLM_OFFLINE_MODE=true). Each server runs the processes stated above, on the "
            "CPUs the pinning line states (without pinning, every process shares every CPU). In this part "
            "the generator is open-loop (requests start on a fixed "
            "schedule, whatever earlier requests are doing; asyncio + aiohttp, one connection pool) and "
            "times each request from its scheduled start, so queueing in any process shows up as latency. "
            "Latency is time to last byte; TTFB is time to the first body byte of a stream. "
            "`added` = percentile of the target minus the same percentile of `direct` at the same rate. "
            "A rate is sustained when it has no errors and the completions within the measured window are "
            f"at least {SUSTAIN_FRACTION:.0%} of the offered rate (✗ after the achieved rate: not sustained, "
            "so its latencies are those of a growing queue); **max** rows are the highest sustained "
            "step of the search (the next step failed; ≥ means the last step passed). CPU ms/req is the "
            "server process's user+system CPU in the measured window divided by the requests answered in "
            "it (on an overloaded point this includes work on requests the client gave up on); "
            "machine CPU % is the whole machine's (100% = all CPUs busy), and in brackets the part used by "
            "processes outside this benchmark (other work sharing the machine).",
            "",
            table,
            "",
            "Capacity search steps:",
            "",
            *searches,
            "",
            "Errors seen: " + ("none." if not errors else ""),
            *errors,
            "",
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
