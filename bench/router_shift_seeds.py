"""Issue 38's bar over several draws of the same world (``bench/router_shift.py`` once per seed): which
profiles miss it on every draw (a class to fix) and which on one (the draw's noise).

Each seed draws its own training, in-distribution, shifted and harder calls; per profile and stream the
table shows, for each seed, the served cost over the odds router (both held to the same target,
``bench/router_shift_bar.py``), whether the target was met on the calls as drawn ('ok'; 'wm': below it
within the confidence margin; 'NO': beyond it), and in brackets the served pass rate minus the target on
the calls' true odds (``true_gap``: the draw's noise left out).

    .venv/bin/python -m bench.router_shift_seeds --seeds 1-8      # bench/results/router_shift_seeds.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.router_shift import RESULTS
from bench.router_shift import main as shift_main
from bench.router_shift_bar import BAR_OVER_ODDS

MEETS = {"yes": "ok", "within margin": "wm", "**no**": "NO"}
STREAMS = ("in-distribution", "shifted", "shifted, harder")


def seeds_of(text: str) -> list[int]:
    """'1-3,7' -> [1, 2, 3, 7]."""
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out


def cell(row: dict[str, Any]) -> str:
    vs = row.get("vs_odds")
    gap = row.get("true_gap")
    text = "—" if vs is None else f"{vs:+.1%}"
    text += f" {MEETS.get(row['meets'], row['meets'])}"
    return text + ("" if gap is None else f" ({gap:+.3f})")


def table(runs: dict[int, list[dict[str, Any]]], over: float = BAR_OVER_ODDS) -> list[str]:
    """Per profile and stream, each seed's cell, then how many seeds are over ``over``, below the
    target beyond the margin, and below it on the true odds, and the median cost over the odds router."""
    seeds = sorted(runs)
    keyed: dict[tuple[str, str], dict[int, dict[str, Any]]] = {
        (r["profile"], r["stream"]): {} for rows in runs.values() for r in rows
    }
    for seed, rows in runs.items():
        for r in rows:
            keyed[(r["profile"], r["stream"])][seed] = r
    order = sorted(keyed, key=lambda k: (STREAMS.index(k[1]) if k[1] in STREAMS else 9, k[0]))
    lines = [
        "| profile / stream | "
        + " | ".join(f"seed {s}" for s in seeds)
        + f" | median vs odds | over {over:.0%} | beyond the margin | below on the true odds |",
        "|---|" + "---|" * len(seeds) + "---:|---:|---:|---:|",
    ]
    for key in order:
        rows = [keyed[key][s] for s in seeds if s in keyed[key]]
        costs = [r["vs_odds"] for r in rows if r.get("vs_odds") is not None]
        n_over = sum(c > over + 1e-12 for c in costs)
        beyond = sum(r["meets"] == "**no**" for r in rows)
        short = sum(r.get("true_gap") is not None and r["true_gap"] < -1e-12 for r in rows)
        median = f"{statistics.median(costs):+.1%}" if costs else "—"
        cells = " | ".join(cell(keyed[key][s]) if s in keyed[key] else "" for s in seeds)
        lines.append(
            f"| {key[0]} / {key[1]} | {cells} | {median} | {n_over} of {len(costs)} "
            f"| {beyond} of {len(rows)} | {short} of {len(rows)} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-8", help="e.g. 1-8 or 1,2,5")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--from", dest="read", help="read DIR/seedN/router_shift.json instead of running")
    args, rest = parser.parse_known_args(argv)
    started = time.perf_counter()
    runs: dict[int, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds_of(args.seeds):
            where = Path(args.read or tmp) / f"seed{seed}"
            if not args.read:
                shift_main([*rest, "--seed", str(seed), "--out", str(where), "--json"])
            runs[seed] = json.loads((where / "router_shift.json").read_text())
    lines = [
        "# Issue 38's bar over seeds (`bench/router_shift_seeds.py`)\n",
        f"`bench.router_shift` {' '.join(rest) or '(defaults)'} once per seed, seeds {args.seeds}. "
        "Each cell: the served cost over the router that knows each call's true odds (both held to the "
        "same target); "
        "'ok' the target met on the calls as drawn, 'wm' below it within the confidence margin, 'NO' "
        "beyond it; in brackets the served pass rate minus the target on the calls' true odds.\n",
        *table(runs),
        f"\n{time.perf_counter() - started:.0f}s\n",
    ]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "router_shift_seeds.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
