"""The tables of the MERA cycle bench (bench/mera_cycle.py): a row per cycle (the task's, or BFCL's with
its per-category table), and the report appended to bench/results/mera_cycle.md."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
HEADER = (
    "| cycle | new demos | admission | student direct | policy pass | teacher alone "
    "| cost vs teacher | fallback | replay s | skillbook s | adapter s | router s | admission s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)
STAGES = ("replay", "skillbook", "adapter", "router", "admission")


def cycle_cells(cycle: Any) -> tuple[str, str, str]:
    """(new demonstrations, what admission did, stage times) of a cycle row."""
    times = " | ".join(f"{cycle.timings.get(s, 0):.1f}" if cycle else "" for s in STAGES)
    if cycle is None:
        what = "(before any cycle)"
    elif cycle.admission is not None:
        a = cycle.admission
        what = f"{a.kind} {a.decision} (b={a.mcnemar_b}, c={a.mcnemar_c})"
    else:
        what = f"{cycle.status}: {cycle.stats.get('admission', {}).get('skipped', cycle.error)[:40]}"
    demos = str(cycle.stats.get("replay", {}).get("demonstrations", 0)) if cycle else ""
    return demos, what, times


def row(k: int, cycle: Any, m: dict[str, float], teacher: dict[str, float]) -> str:
    demos, what, times = cycle_cells(cycle)
    return (
        f"| {k} | {demos} | {what} | {m['direct']:.3f} | {m['policy']:.3f} | {teacher['pass']:.3f} "
        f"| {m['cost_rel']:.3f} | {m['fallback']:.3f} | {times} |"
    )


BFCL_HEADER = (
    "| cycle | new demos | admission | student direct live | student direct BFCL | policy live "
    "| policy BFCL | teacher alone BFCL | cost vs teacher | fallback | perfect router BFCL / cost vs teacher "
    "| replay s | skillbook s | adapter s | router s | admission s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def bfcl_row(
    k: int,
    cycle: Any,
    direct: dict[str, Any],
    policy: dict[str, Any],
    teacher: dict[str, Any],
    perfect: dict[str, float],
) -> str:
    demos, what, times = cycle_cells(cycle)

    def rel(cost: float) -> float:
        return cost / teacher["cost"] if teacher["cost"] else float("nan")

    return (
        f"| {k} | {demos} | {what} | {direct['live']:.3f} | {direct['correct']:.3f} | {policy['live']:.3f} "
        f"| {policy['correct']:.3f} | {teacher['correct']:.3f} | {rel(policy['cost']):.3f} "
        f"| {policy['fallback']:.3f} | {perfect['correct']:.3f} / {rel(perfect['cost']):.3f} | {times} |"
    )


def bfcl_categories(
    first: dict[str, Any], last: dict[str, Any], policy: dict[str, Any], teacher: dict[str, Any]
) -> str:
    lines = [
        "| category | student direct BFCL, before -> after | policy BFCL, after | teacher alone BFCL |",
        "|---|---|---|---|",
    ]
    for category, before in first["categories"].items():
        lines.append(
            f"| {category} | {before:.3f} -> {last['categories'].get(category, 0):.3f} "
            f"| {policy['categories'].get(category, 0):.3f} | {teacher['categories'].get(category, 0):.3f} |"
        )
    return "\n".join(lines)


def report(
    args: argparse.Namespace,
    base: Path,
    n_train: int,
    n_heldout: int,
    header: str,
    lines: list[str],
    extra: str = "",
) -> None:
    teacher = args.teacher_url or (
        "stub (answers every task correctly, fixed distilled advice)"
        if args.teacher == "stub"
        else f"the base model itself, best-of-{args.samples} filtered by "
        + ("BFCL's checker (502 when no answer is correct)" if args.task == "bfcl" else "the verifier")
    )
    text = (
        f"## MERA cycle: {args.task} task, student {args.student} ({base.name}), {args.cycles} cycles\n\n"
        f"`{' '.join(['python -m bench.mera_cycle', *sys.argv[1:]])}` on {platform.node()} "
        f"({os.cpu_count()} CPUs), {time.strftime('%Y-%m-%d')}. Teacher: {teacher}. {n_train} train tasks "
        f"(a new batch per cycle), {n_heldout} held-out tasks (never trained on). Training: "
        f"{args.hyperparameters or 'defaults'}{', then GRPO' if args.grpo else ''}. Times in seconds.\n\n"
        f"{header}\n" + "\n".join(lines) + "\n" + (f"\n{extra}\n" if extra else "")
    )
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / "mera_cycle.md").open("a") as out:
        out.write(text + "\n")
