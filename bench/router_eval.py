"""The learned router (MERA) on synthetic replays with known ground truth, one regime at a time.

For each regime: generate calls (train + calibration shards by hash of the task id, and a held-out
set from another seed), train the class-balanced logistic regression with grouped CV, calibrate
the threshold to the target on the calibration shard, then print one markdown table of the
learned router, the baselines, the oracle and the Bayes router (knows the true student success
probability: the best any router could do), plus the routing latency per call. Curves go to
bench/results/router-<regime>.png, the tables to bench/results/router_eval.md.

    .venv/bin/python -m bench.router_eval                       # all regimes, ~10 min on 2 cores
    .venv/bin/python -m bench.router_eval --quick               # smaller sets, ~2 min
    .venv/bin/python -m bench.router_eval --regimes weak_verifier,no_verifier --features hashing
    .venv/bin/python -m bench.router_eval --he-mbpp             # how to record a real replay
    .venv/bin/python -m bench.router_eval --sources all --features hashing   # per profile, several sources

``--sources`` evaluates the router as deployed, per profile (a threshold per profile, calibrated on
its own calls), on replays from several sources (bench/router_replays/sources.py), every call
tested once over five shard rotations; tables to bench/results/router_sources.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.router_data.plot import plot_report
from bench.router_data.synthetic import NOISE, REGIMES, SHARPNESS, Regime, generate
from bench.router_replays.sources import SOURCES, TUNED_ON
from routing.router.learning.calibration import PolicyData, Split, Target, calibrate
from routing.router.learning.evaluate import evaluate, featurize, markdown, routing_latency, summary
from routing.router.learning.features import (
    CallInput,
    Featurizer,
    default_spec,
    hashing_spec,
    make_featurizer,
    minilm_spec,
)
from routing.router.learning.metrics import policy_metrics
from routing.router.learning.model import fit_router_model
from routing.router.learning.profiles import MODES, hindsight_vs_oracle, route_every_call, summarize
from routing.router.learning.profiles import markdown as profile_markdown
from routing.router.learning.records import ReplayRecord

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

HE_MBPP = """\
Real replay: HumanEval+MBPP (eval/he_mbpp.jsonl) as the code profile's task set.
SmolLM2-135M's answers, executed against the tests, are recorded in
bench/router_replays/data/he_mbpp_smollm2.jsonl (python -m bench.router_replays.he_mbpp_record), with a
simulated teacher: `--sources he-mbpp` evaluates it. With a real student and teacher configured:
 1. Create a task profile `code` with verifier {"kind": "python_tests"} and policy
    student_with_fallback, and set the background teacher sample to 100% for this run, so every
    call has both legs (the ledger then holds student verdict, teacher verdict and the tests'
    result as correctness).
 2. For each task, POST /v1/chat/completions with model "auto", header X-Skillgate-Task: code,
    metadata {"task_id": <task id>, "verifier": {"kind": "python_tests", "tests": <its tests>}}.
 3. manage.py replay_export --profile code --out var/he_mbpp.jsonl --complete-only
 4. manage.py router_eval --replay var/he_mbpp.jsonl --target 0.98 --relative
With ~560 tasks the held-out shard has ~110 calls: read its pass rates with that noise in mind.
"""


def run_regime(
    regime: Regime,
    records: list[ReplayRecord],
    test: list[ReplayRecord],
    featurizer: Featurizer,
    args: argparse.Namespace,
    png: Path,
) -> tuple[str, dict[str, Any]]:
    train, calib, _ = Split().parts(records)
    bound = None
    if regime.p95_vs_teacher is not None:  # the operator's bound: as fast as the teacher alone at P95
        bound = round(
            regime.p95_vs_teacher
            * float(np.percentile([r.teacher.latency_ms for r in records if r.teacher], 95))
        )
    target = Target(args.target, True, bound, args.z)
    report = evaluate(
        train, calib, test, featurizer=featurizer, target=target, name=regime.name, seed=args.seed
    )
    # The Bayes router ranks by the generator's true log-odds from the content: the best any
    # router could do on these calls (the per-call noise is hidden from it too).
    bayes_cal = calibrate(
        PolicyData.from_records(calib), np.asarray([-r.meta["logit"] for r in calib]), target
    )
    bayes = np.asarray([-r.meta["logit"] for r in test])
    report.rows.append(
        policy_metrics(
            "bayes (true log-odds, reference)",
            PolicyData.from_records(test),
            bayes >= bayes_cal.threshold,
            scores=bayes,
            threshold=bayes_cal.threshold,
        )
    )
    sample = test[: args.latency_calls]
    routing_latency(report.router, featurizer, sample[:20])  # warm-up: session, context cache
    report.latency = routing_latency(report.router, featurizer, sample)
    cold = routing_latency(report.router, featurizer, sample[:50], cold=True) if featurizer.embedder else None
    plot_report(report, png)
    text = f"## {regime.name}: {regime.description}\n\n{markdown(report)}\n\n{summary(report)}\n"
    if cold:
        text += (
            f"- cold context cache (a system prompt + tools not seen before): P50 {cold['p50_ms']:.1f} ms\n"
        )
    text += f"- curves: {png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}\n"
    result = {
        "rows": [r.to_json() for r in report.rows],
        "checks": report.checks,
        "latency": report.latency,
        "cold_latency": cold,
        "threshold": report.router.threshold,
        "target": target.to_json(),
        "model_info": report.router.model.info,
    }
    return text, result


def decision_latency(featurizer: Featurizer, records: list[ReplayRecord]) -> dict[str, float]:
    """Wall time of one routing decision (CallInput, features, score), one call at a time, on a
    model fitted to these calls."""
    x = featurize(records, featurizer)
    y = np.asarray([bool(r.needs_teacher) for r in records], dtype=int)
    model = fit_router_model(x, y, np.arange(len(records)), spec=featurizer.spec, c_grid=(0.1,), folds=1)
    times = []
    for record in records:
        started = time.perf_counter()
        model.score(featurizer.transform(CallInput.from_record(record)))
        times.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": float(np.percentile(times, 50)), "p95_ms": float(np.percentile(times, 95))}


def run_sources(args: argparse.Namespace) -> int:
    names = list(SOURCES) if args.sources == "all" else args.sources.split(",")
    modes = args.modes.split(",")
    spec = {"auto": default_spec, "minilm": minilm_spec, "hashing": hashing_spec}[args.features]()
    featurizer = make_featurizer(spec)
    target = Target(args.target, True, None, args.z)
    header = (
        f"# The router per profile on replays from several sources\n\nfeatures: {spec.embedder} "
        f"({spec.dims} dims, meta v{spec.version}); target {args.target:g}x always-teacher per profile, "
        f"paired (MOVER, exact bounds) margin at z={args.z:g}; pooled model (profile x meta shrunk x2, "
        f"text weight and C by grouped CV), a threshold "
        f"per profile on its calibration shard plus its training calls' out-of-fold scores; every call "
        f"tested once over 5 shard rotations; tuned on: {', '.join(TUNED_ON)}; {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} at start\n"
    )
    print(header, flush=True)
    sections, results = [header], {}
    for name in names:
        description, build = SOURCES[name]
        records = build()
        for mode in modes:
            started = time.perf_counter()
            routed = route_every_call(
                records, featurizer=featurizer, target=target, mode=mode, seed=args.seed
            )
            rows = summarize(routed, target)
            tuned = "tuned on" if name in TUNED_ON else "NOT tuned on"
            worst = max(r.cost_vs_oracle for r in rows)
            text = (
                f"## {name} ({tuned}), {mode}: {description}\n\n{profile_markdown(rows)}\n\n"
                f"- worst profile vs oracle: {worst:+.1%}; every profile within 15%: "
                f"{all(r.cost_vs_oracle <= 0.15 for r in rows)}; target met on every profile: "
                f"{all(r.meets_target for r in rows)}; with hindsight thresholds (no margin) the worst is "
                f"{max(r.hindsight_vs_oracle for r in rows):+.1%}; {time.perf_counter() - started:.0f}s\n"
            )
            results[f"{name}/{mode}"] = [r.to_json() for r in rows]
            if all("category" in r.meta for r in routed.calls):  # the same decisions, per category
                by = summarize(routed, target, lambda r: f"{r.profile} / {r.meta['category']}")
                text += (
                    "\nThe same decisions per category (thresholds stay per profile; 'required' is 0.98x "
                    f"the teacher's pass rate on the category's calls):\n\n{profile_markdown(by)}\n"
                )
                results[f"{name}/{mode}/categories"] = [r.to_json() for r in by]
            print(text, flush=True)
            sections.append(text)
        if all("logit" in r.meta for r in records):  # a generator replay: its own content log-odds
            ceiling = hindsight_vs_oracle(records, [-float(r.meta["logit"]) for r in records], target)
            line = (
                f"- {name}: content ceiling (the generator's own log-odds as the score, hindsight "
                f"thresholds): worst {max(ceiling.values()):+.1%} vs oracle ("
                + ", ".join(f"{p} {v:+.1%}" for p, v in ceiling.items())
                + ")\n"
            )
            results[f"{name}/content_ceiling"] = [ceiling]
            print(line, flush=True)
            sections.append(line)
        if args.latency_calls:
            lat = decision_latency(featurizer, [r for r in records if r.complete][: args.latency_calls])
            line = f"- {name}: one routing decision P50 {lat['p50_ms']:.2f} ms, P95 {lat['p95_ms']:.2f} ms\n"
            results[f"{name}/latency"] = [lat]
            print(line, flush=True)
            sections.append(line)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "router_sources.md").write_text("\n".join(sections))
    (out / "router_sources.json").write_text(json.dumps(results, indent=1, default=float))
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--regimes", default="all")
    parser.add_argument("--n", type=int, default=5000, help="calls for train + calibration")
    parser.add_argument("--test-n", type=int, default=3000, help="held-out calls")
    parser.add_argument("--target", type=float, default=0.98, help="share of always-teacher's pass rate")
    parser.add_argument("--z", type=float, default=1.0)
    parser.add_argument("--features", choices=["auto", "minilm", "hashing"], default="auto")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sharpness", type=float, help="generator: how strongly the content decides success")
    parser.add_argument("--noise", type=float, help="generator: log-odds noise the content does not show")
    parser.add_argument("--latency-calls", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="2000 + 1500 calls")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--he-mbpp", action="store_true", help="print how to record a real replay, then exit")
    parser.add_argument("--sources", help="per-profile evaluation on these replays (comma list, or all)")
    parser.add_argument("--modes", default="pooled", help=f"with --sources: any of {', '.join(MODES)}")
    args = parser.parse_args(argv)
    if args.sources:
        return run_sources(args)
    if args.he_mbpp:
        print(HE_MBPP)
        return 0
    if args.quick:
        args.n, args.test_n = 2000, 1500

    names = list(REGIMES) if args.regimes == "all" else args.regimes.split(",")
    spec = {"auto": default_spec, "minilm": minilm_spec, "hashing": hashing_spec}[args.features]()
    started = time.perf_counter()
    featurizer = make_featurizer(spec)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    knobs = {k: v for k, v in (("sharpness", args.sharpness), ("noise", args.noise)) if v is not None}
    suffix = "".join(f"-{k}{v:g}" for k, v in knobs.items())
    gen = f"sharpness {knobs.get('sharpness', SHARPNESS):g}, noise {knobs.get('noise', NOISE):g}"
    header = (
        f"# Learned router on synthetic replays\n\nfeatures: {spec.embedder} ({spec.dims} dims, "
        f"{spec.embedder_id or 'no model'}); target {args.target:g}x always-teacher (z={args.z:g}); "
        f"generator {gen}; {args.n} train+calibration calls (shards {Split().train} train, "
        f"{Split().calibrate} calibrate), {args.test_n} held-out calls from another seed; "
        f"{os.cpu_count()} CPUs ({platform.machine()}), load average {os.getloadavg()[0]:.1f} at start; "
        f"featurizer ready in {time.perf_counter() - started:.1f}s\n"
    )
    print(header)
    sections, results = [header], {}
    for name in names:
        t0 = time.perf_counter()
        records = generate(args.n, regime=name, seed=args.seed, **knobs)
        test = generate(args.test_n, regime=name, seed=args.seed + 1000, **knobs)
        text, results[name] = run_regime(
            REGIMES[name], records, test, featurizer, args, out / f"router-{name}{suffix}.png"
        )
        text += f"- {time.perf_counter() - t0:.0f}s for this regime\n"
        print(text, flush=True)
        sections.append(text)
    (out / f"router_eval{suffix}.md").write_text("\n".join(sections))
    (out / f"router_eval{suffix}.json").write_text(json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
