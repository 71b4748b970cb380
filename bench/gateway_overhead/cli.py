"""The command line: ``python -m bench.gateway_overhead [options]`` runs the benchmark; the ``_load``
subcommand is its own child process (the load generator), ``_profile`` samples a server under load."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import bench.gateway_overhead
from bench.gateway_overhead.children import pin
from bench.gateway_overhead.common import (
    CLOSED_TARGETS,
    CONNECTIONS,
    DEFAULT_RATES,
    DEFAULT_STEPS,
    RESULTS,
    ROOT,
    TARGET_ORDER,
    WORK,
    BenchError,
    log,
)
from bench.gateway_overhead.counters import counters_main
from bench.gateway_overhead.load import load_main
from bench.gateway_overhead.measure import Settings, capacity_search, run_closed, run_point
from bench.gateway_overhead.profile import profile_main
from bench.gateway_overhead.report import environment_lines, render_table, search_log, write_report
from bench.gateway_overhead.servers import (
    Target,
    managed_children,
    sanity_check,
    start_floor,
    start_floor_aiohttp,
    start_litellm_proxy,
    start_skillgate,
    start_stub,
)
from bench.gateway_overhead.verdict import checks_table, closed_table


def parse_rates(text: str) -> list[float]:
    rates = sorted({float(item) for item in text.split(",") if item.strip()})
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError("rates must be positive numbers, comma separated")
    return rates


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gateway_overhead",
        description=bench.gateway_overhead.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rates", default=None, help=f"fixed request rates, RPS (default {DEFAULT_RATES})")
    parser.add_argument(
        "--duration", type=float, default=None, help="measured seconds per point (default 10)"
    )
    parser.add_argument("--warmup", type=float, default=None, help="discarded seconds per point (default 3)")
    parser.add_argument(
        "--search-steps", default=None, help=f"capacity search rates (default {DEFAULT_STEPS})"
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="client timeout per request, s (default 10)"
    )
    parser.add_argument("--skip-proxy", action="store_true", help="do not start or measure the LiteLLM proxy")
    parser.add_argument(
        "--targets",
        default=",".join(TARGET_ORDER[1:]),
        help=f"which targets to measure besides direct (default all: {','.join(TARGET_ORDER[1:])})",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes of Skillgate and of the floor (uvicorn --workers; default 1)",
    )
    parser.add_argument(
        "--max-in-flight", type=int, default=0, help="Skillgate's SKILLGATE_MAX_IN_FLIGHT (0: no limit)"
    )
    parser.add_argument("--skip-search", action="store_true", help="only the fixed rates, no capacity search")
    parser.add_argument(
        "--connections",
        default=CONNECTIONS,
        help=f"closed-loop points of {', '.join(CLOSED_TARGETS)}: connection counts (default {CONNECTIONS}; "
        "'' for none)",
    )
    parser.add_argument(
        "--pin",
        default="auto",
        help="CPU(s) of the gateway under test (taskset); the stub and the load generator get the others. "
        "'auto': CPU 0 when there are 2+ CPUs and --workers is 1; 'none': no pinning",
    )
    parser.add_argument(
        "--database-url",
        default=None,
        help="PostgreSQL URL of a throw-away database (name containing 'bench')",
    )
    parser.add_argument("--quick", action="store_true", help="short smoke run: 2 s points, low rates")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness increment for this run and its children; negative (root only) shields the "
        "measurement from other work on a shared machine (default 0)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="markdown results file")
    args = parser.parse_args(argv)
    args.targets = [name.strip() for name in args.targets.split(",") if name.strip()]
    args.connections = sorted({int(c) for c in args.connections.split(",") if c.strip()})
    if args.pin == "auto":
        args.pin = "0" if (os.cpu_count() or 1) >= 2 and args.workers == 1 else "none"
    unknown = set(args.targets) - set(TARGET_ORDER[1:])
    if unknown:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    if args.skip_proxy:
        args.targets = [name for name in args.targets if name != "litellm-proxy"]
    args.rates = args.rates or ("20,50" if args.quick else DEFAULT_RATES)
    args.search_steps = args.search_steps or ("10,20,50,100" if args.quick else DEFAULT_STEPS)
    args.duration = args.duration or (2.0 if args.quick else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 3.0)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rates, steps = parse_rates(args.rates), parse_rates(args.search_steps)
    cfg = Settings(duration=args.duration, warmup=args.warmup, timeout=args.timeout)
    WORK.mkdir(parents=True, exist_ok=True)
    if args.nice:
        try:
            os.nice(args.nice)
        except PermissionError:
            raise BenchError(f"--nice {args.nice} needs root") from None
    if args.pin != "none":
        pin(args.pin)
    with managed_children() as children:
        stub = start_stub(children)
        log(f"stub upstream at {stub.base_url}")
        targets: list[Target] = [stub]
        router: dict[str, Any] = {}
        db_label = "–"
        if "floor" in args.targets:
            targets.append(start_floor(children, stub, args.workers))
            log(f"floor at {targets[-1].base_url}")
        if "floor-aiohttp" in args.targets:
            targets.append(start_floor_aiohttp(children, stub, args.workers))
            log(f"floor-aiohttp at {targets[-1].base_url}")
        if {"skillgate-full", "skillgate-cheap"} & set(args.targets):
            configs, db_label, router = start_skillgate(
                children, stub, args.database_url, args.max_in_flight, args.workers
            )
            targets += [t for t in configs if t.name in args.targets]
            log(f"skillgate at {configs[0].base_url} on {db_label}; full config's router: {router}")
        if "litellm-proxy" in args.targets:
            targets.append(start_litellm_proxy(children, stub))
            log(f"litellm proxy at {targets[-1].base_url}")
        for target in targets:
            sanity_check(target)
        groups = {t.name: t.pgid for t in targets}
        known: dict[tuple[str, str, float], dict[str, Any]] = {}
        fixed: list[dict[str, Any]] = []
        for stream in (False, True):
            for rate in rates:
                for target in targets:
                    result = run_point(children, target, groups, stream, rate, cfg)
                    known[(target.name, result["mode"], rate)] = result
                    fixed.append(result)
        closed: dict[tuple[str, str, int], dict[str, Any]] = {}
        for stream in (False, True):
            for target in [t for t in targets if t.name in CLOSED_TARGETS]:
                for count in args.connections:
                    result = run_closed(children, target, groups, stream, count, cfg)
                    closed[(target.name, result["mode"], count)] = result
        searches = []
        if not args.skip_search:
            for stream in (False, True):
                for target in targets:
                    searches.append(capacity_search(children, target, groups, stream, steps, cfg, known))
            # the direct baseline at each target's highest sustained rate, for its "added" latency
            for search in searches:
                if (
                    search["best"] is not None
                    and ("direct", search["mode"], search["best"]["rate"]) not in known
                ):
                    rate, stream = search["best"]["rate"], search["mode"] == "stream"
                    known[("direct", search["mode"], rate)] = run_point(
                        children, stub, groups, stream, rate, cfg
                    )
        env_lines = environment_lines(db_label, "litellm-proxy" in args.targets, args.workers, router)
        env_lines.append(
            f"- Pinning: the gateways on CPU {args.pin}, the stub and the load generator on the others "
            "(taskset)"
            if args.pin != "none"
            else "- Pinning: none (every process on every CPU)"
        )
    table = render_table(fixed, searches, known)
    errors = [
        f"- {r['target']} / {r['mode']} / {r['rate']:.0f} RPS: "
        + "; ".join(
            [f"{n}× {kind}" for kind, n in r["error_kinds"].items()]
            + [f"{n}× {kind} during warm-up" for kind, n in r["warmup_errors"].items()]
        )
        for r in sorted(known.values(), key=lambda r: (r["target"], r["mode"], r["rate"]))
        if r["errors"] or r["warmup_errors"]
    ]
    sections = closed_table(closed, args.connections), checks_table(closed, known, args.connections)
    write_report(args.output, args, cfg, env_lines, table, search_log(searches, known), errors, sections)
    raw = {"open_loop": list(known.values()), "closed_loop": list(closed.values())}
    (WORK / "results.json").write_text(json.dumps(raw, indent=1))
    print(table, *sections[0], *sections[1], sep="\n")
    log(f"wrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}")
    return 0


def run(argv: list[str]) -> None:
    """``_load`` runs the load generator's child part, ``_profile`` samples the server under load
    (bench/gateway_overhead/profile.py), ``_counters`` counts GC and upstream connections per call inside it
    (counters.py); anything else runs the benchmark, and exits. (Skillgate's
    database is seeded by its own module, ``python -m bench.gateway_overhead.seed``: it sets Django up,
    which this process does not.)"""
    if argv[:1] == ["_load"]:
        load_main(argv[1:])
    elif argv[:1] == ["_profile"]:
        profile_main(argv[1:])
    elif argv[:1] == ["_counters"]:
        counters_main(argv[1:])
    else:
        try:
            sys.exit(main(argv))
        except BenchError as exc:
            log(f"error: {exc}")
            sys.exit(1)
        except KeyboardInterrupt:
            log("interrupted")
            sys.exit(130)
