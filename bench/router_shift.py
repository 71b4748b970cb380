"""The learned router per profile on a shifted mix of the same world, next to its in-distribution numbers.

As deployed, one router version per profile: trained and calibrated on that profile's in-distribution
calls (synthetic, known ground truth), then replayed unchanged on a held-out in-distribution set and on
a shifted one: another profile mix, and harder calls whose difficulty the features do not show (more
log-odds noise, the student's success lower). Per profile: the pass rate against the required one, the
cost relative to always-teacher and to the oracle router (the one that knows each call's true odds), and
what the safe fallback (the teacher, which a flagged version hands the profile to) costs there.

"Served" replays the drift watch on each stream in its order, as deployed: a background teacher sample
labels a student-served answer at ``--sample-rate`` (4x while a test leans towards drift), a teacher-served
one is the reference; every ``--check-every`` calls (from 50) the drift checks' own sequential tests
(``routing/router/learning/sequential.py``: correctness, fallback rate, cost per call, teacher share) judge
the calls so far against the version's calibration. Drift of correctness stops the version: the teacher
serves the rest (the safe fallback, until the fallback is measured again). Drift of cost, teacher share or
fallbacks alone is alerted and retrained, and the version keeps serving (retraining is not replayed here).
The served numbers are what callers got.

    .venv/bin/python -m bench.router_shift                 # ~1 min on 2 cores; bench/results/router_shift.md
    .venv/bin/python -m bench.router_shift --n 2000 --test-n 1500
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.router_data.synthetic import NOISE, REGIMES, SHARPNESS, Regime, generate
from routing.router.learning.calibration import PolicyData, Split, Target
from routing.router.learning.evaluate import TrainedRouter, featurize, train_and_calibrate
from routing.router.learning.features import Featurizer, hashing_spec, make_featurizer
from routing.router.learning.metrics import oracle_metrics, policy_metrics
from routing.router.learning.records import ReplayRecord
from routing.router.learning.sequential import cost_sprt, fallback_sprt, share_moved, sprt

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHIFTED_MIX = {
    "tool_call": 0.35,
    "json_extract": 0.1,
    "code": 0.3,
    "log_diagnosis": 0.2,
    "summarization": 0.05,
}


def by_profile(records: list[ReplayRecord]) -> dict[str, list[ReplayRecord]]:
    out: dict[str, list[ReplayRecord]] = defaultdict(list)
    for record in records:
        if record.complete:
            out[record.profile].append(record)
    return out


@dataclass(frozen=True)
class Watch:
    sample_rate: float = 0.05
    boost: float = 4.0
    check_every: int = 50
    pass_margin: float = 0.05
    share_margin: float = 0.10


def flagged_at(
    sim: dict[str, np.ndarray], to_teacher: np.ndarray, trained: TrainedRouter, watch: Watch, seed: int
) -> tuple[int | None, str, int | None]:
    """The call after which the drift watch first flags the stream (None: never) and which tests did,
    and the call after which correctness drifted (the version stops serving; None: never)."""
    chosen = trained.calibration.chosen
    rng = np.random.default_rng(seed)
    labels: list[bool] = []
    weights: list[float] = []
    suspected = False
    first: tuple[int | None, str] = (None, "")
    for i in range(len(to_teacher)):
        if to_teacher[i] or sim["fallback"][i]:
            labels.append(bool(sim["ok"][i]))  # the teacher served: the reference
            weights.append(1.0)
        else:
            rate = min(1.0, watch.sample_rate * (watch.boost if suspected else 1.0))
            if rng.random() < rate:
                labels.append(bool(sim["ok"][i]))
                weights.append(1.0 / rate)
        n = i + 1
        if n < watch.check_every or n % watch.check_every:
            continue
        tests = {
            "correctness": sprt(labels, weights, chosen.pass_rate, chosen.pass_rate - watch.pass_margin),
            "fallback rate": fallback_sprt(int(sim["fallback"][:n].sum()), n, chosen.fallback_rate),
            "cost per call": cost_sprt([float(c) for c in sim["cost"][:n]], chosen.cost_usd),
        }
        found = [name for name, test in tests.items() if test.decision == "drift"]
        if share_moved(int(to_teacher[:n].sum()), n, chosen.teacher_share, watch.share_margin):
            found.append("teacher share")
        if found and first[0] is None:
            first = (n, ", ".join(found))
        if "correctness" in found:
            return first[0], first[1], n
        suspected = any(test.decision == "suspected" for test in tests.values())
    return first[0], first[1], None


def row(
    name: str,
    records: list[ReplayRecord],
    trained: TrainedRouter,
    featurizer: Featurizer,
    target: Target,
    watch: Watch,
) -> str:
    data = PolicyData.from_records(records)
    scores = trained.model.score_many(featurize(records, featurizer))
    to_teacher = scores >= trained.threshold
    learned = policy_metrics("learned", data, to_teacher)
    oracle = oracle_metrics(data)
    required = target.required(float(data.t_ok.mean()))
    meets = "yes" if learned.pass_rate >= required - 1e-12 else "**no**"
    vs_oracle = learned.cost_usd / oracle.cost_usd - 1 if oracle.cost_usd else float("nan")
    sim = data.simulate(to_teacher)
    at, which, stop = flagged_at(sim, to_teacher, trained, watch, seed=len(records))
    ok, cost = sim["ok"].astype(float), sim["cost"].astype(float)
    if stop is not None:  # correctness drifted: the teacher serves from the next call on
        ok[stop:], cost[stop:] = data.t_ok[stop:], data.t_cost[stop:]
    served_pass, served_cost = float(ok.mean()), float(cost.mean())
    served_meets = "yes" if served_pass >= required - 1e-12 else "**no**"
    served_vs_oracle = served_cost / oracle.cost_usd - 1 if oracle.cost_usd else float("nan")
    flag = f"{at} ({which})" if at is not None else "—"
    if stop is not None:
        flag += f"; stops at {stop}" if stop != at else "; stops"
    return (
        f"| {name} | {len(records)} | {learned.pass_rate:.3f} | {required:.3f} | {meets} | "
        f"{learned.cost_rel:.1%} | {vs_oracle:+.1%} | {learned.fallback_rate:.1%} | {flag} | "
        f"{served_pass:.3f} | {served_meets} | {served_cost / float(data.t_cost.mean()):.1%} | "
        f"{served_vs_oracle:+.1%} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regime", default="mixed", choices=sorted(REGIMES))
    parser.add_argument("--n", type=int, default=4000, help="in-distribution calls to train + calibrate")
    parser.add_argument("--test-n", type=int, default=2500, help="calls in each test set")
    parser.add_argument("--target", type=float, default=0.98)
    parser.add_argument("--noise", type=float, default=NOISE * 3, help="the shifted set's log-odds noise")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sample-rate", type=float, default=0.05, help="background teacher samples")
    parser.add_argument("--check-every", type=int, default=50, help="calls between drift checks")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    base = REGIMES[args.regime]
    shifted_regime = Regime(
        f"{base.name}-shifted", base.description, base.verifiers, base.student_cost_ratio, mix=SHIFTED_MIX
    )
    featurizer = make_featurizer(hashing_spec(ngram_dims=1024))
    target = Target(args.target, True, None, 1.0)
    train_all = by_profile(generate(args.n, regime=base, seed=args.seed))
    tests = {
        "in-distribution": by_profile(generate(args.test_n, regime=base, seed=args.seed + 1000)),
        "shifted": by_profile(
            generate(
                args.test_n,
                regime=shifted_regime,
                seed=args.seed + 2000,
                sharpness=SHARPNESS,
                noise=args.noise,
            )
        ),
    }
    lines = [
        f"# The router per profile on a shifted mix (`bench/router_shift.py`, regime {base.name})\n",
        f"One version per profile, trained on {args.n} in-distribution calls (hashed n-grams), replayed "
        f"unchanged; target {args.target:g}x always-teacher (z=1). Shifted: profile mix {SHIFTED_MIX}, "
        f"log-odds noise {args.noise:g} (in distribution {NOISE:g}). 'vs oracle': cost over the router that "
        "knows each call's true odds. A profile that misses its target on the shifted mix is what drift must "
        "catch: once flagged, the profile is served by its safe fixed policy (the teacher: pass rate 1.00x "
        "the teacher's, cost 100%).\n",
        f"Served: the drift watch replayed on each stream (teacher samples at {args.sample_rate:g}, 4x while "
        f"suspected; a check every {args.check_every} calls); 'flagged' is the call count at the first check "
        "that found drift, and which test did; 'stops': correctness drifted there, and the teacher serves "
        "the rest. Drift of cost, teacher share or fallbacks alone keeps the version serving (and retrains "
        "it; the retrain is not replayed here).\n",
        "| profile / set | calls | pass | required | meets | cost vs teacher | vs oracle | fallbacks "
        "| flagged | served pass | served meets | served cost | served vs oracle |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|---:|---|---:|---:|",
    ]
    watch = Watch(sample_rate=args.sample_rate, check_every=args.check_every)
    for profile, records in sorted(train_all.items()):
        train, calib, _ = Split().parts(records)
        trained = train_and_calibrate(train, calib, featurizer=featurizer, target=target, c_grid=(0.03, 0.3))
        for name, sets in tests.items():
            if sets.get(profile):
                lines.append(row(f"{profile} / {name}", sets[profile], trained, featurizer, target, watch))
    lines.append(f"\n{time.perf_counter() - started:.0f}s\n")
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "router_shift.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
