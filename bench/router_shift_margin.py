"""Where a profile's cost over the odds router comes from, on many fresh in-distribution calls
(``docs/benchmarks/router.md``, issue 38's bar): the threshold or the ranking.

Per seed and profile, the version as ``bench/router_shift.py`` trains it (``--n`` calls), then on
``--fresh`` new in-distribution calls (a seed of their own): its cost over the odds router and its pass
rate minus the target on the calls' true odds at the threshold calibration chose; then the same scores
at the cheapest threshold meeting the target on the true odds (the ranking's share of the gap; the rest
is the threshold's); and calibration's own view of its chosen point (its pass rate over the target on the
calibration calls, and the confidence bound's margin left).

    .venv/bin/python -m bench.router_shift_margin --seeds 1,2 --profiles summarize,extract
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from bench.router_data.synthetic import REGIMES, generate
from bench.router_shift import by_profile
from bench.router_shift_bar import odds_of, odds_router
from bench.router_shift_seeds import seeds_of
from routing.router.learning.calibration import PolicyData, Split, Target
from routing.router.learning.evaluate import featurize, train_and_calibrate
from routing.router.learning.features import hashing_spec, make_featurizer


def hindsight_on_odds(
    scores: np.ndarray, data: PolicyData, odds_required: float, served: Callable[[np.ndarray], np.ndarray]
) -> float:
    """The mean cost of the cheapest threshold on ``scores`` whose pass rate on the true odds meets the
    required one (``served``: ``Odds.served``)."""
    order = np.argsort(-scores, kind="stable")
    best = float(data.t_cost.mean())
    for k in range(len(scores) + 1):
        to_teacher = np.zeros(len(scores), dtype=bool)
        to_teacher[order[:k]] = True
        if float(served(to_teacher).mean()) >= odds_required - 1e-12:
            best = min(best, float(data.simulate(to_teacher)["cost"].mean()))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--profiles", default="summarize,extract")
    parser.add_argument("--n", type=int, default=4000, help="in-distribution calls to train + calibrate")
    parser.add_argument("--fresh", type=int, default=12500, help="fresh in-distribution calls, all profiles")
    args = parser.parse_args(argv)
    featurizer = make_featurizer(hashing_spec(ngram_dims=1024))
    target = Target(0.98, True, None, 1.0)
    print(
        "| seed / profile | calibration calls | its pass over the target | bound's margin | fresh calls "
        "| over the target on the true odds | vs odds router "
        "| same scores, threshold in hindsight on the odds |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for seed in seeds_of(args.seeds):
        train_all = by_profile(generate(args.n, regime=REGIMES["mixed"], seed=seed))
        fresh = by_profile(generate(args.fresh, regime=REGIMES["mixed"], seed=seed + 5000))
        for profile in args.profiles.split(","):
            train, calib, _ = Split().parts(train_all[profile])
            trained = train_and_calibrate(
                train, calib, featurizer=featurizer, target=target, c_grid=(0.03, 0.3)
            )
            chosen, cal = trained.calibration.chosen, trained.calibration
            records = fresh[profile]
            odds, router = odds_of(records), odds_router(records, target)
            assert odds is not None and router is not None  # generator calls carry their odds
            scores = trained.model.score_many(featurize(records, featurizer))
            data = PolicyData.from_records(records)
            to_teacher = scores >= trained.threshold
            gap = float(odds.served(to_teacher).mean()) - router.required
            cost = float(data.simulate(to_teacher)["cost"].mean())
            best = hindsight_on_odds(scores, data, router.required, odds.served)
            print(
                f"| {seed} / {profile} | {cal.n} | {chosen.pass_rate - cal.required_pass_rate:+.4f} "
                f"| {chosen.margin:+.4f} | {len(records)} | {gap:+.4f} | {cost / router.cost - 1:+.1%} "
                f"| {best / router.cost - 1:+.1%} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
