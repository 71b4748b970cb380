"""The router per profile, as deployed: one threshold per profile, calibrated on its own calls.

Production trains one RouterVersion per task profile and calibrates it on that profile's
calibration shard. ``evaluate_profiles`` replays exactly that on a replay with several profiles,
in one of three ways of fitting the score:

- ``pooled``: one model on every profile's training calls (profile one-hot + profile x meta
  deviations, shrunk towards the shared coefficients), then a threshold per profile;
- ``separate``: a model per profile on its own calls only;
- ``global``: the pooled model with one threshold for all profiles (the benchmark's former way).

Every call is tested once: the five hash shards rotate (test shard f, calibration shard f+1, the
other three train), and the test decisions of the five rotations are joined before the metrics.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from routing.router.learning.calibration import PolicyData, Split, Target, calibrate
from routing.router.learning.evaluate import featurize
from routing.router.learning.features import Featurizer
from routing.router.learning.metrics import oracle_metrics, policy_metrics
from routing.router.learning.model import SHRINK, LearnedRouterModel, fit_router_model
from routing.router.learning.records import ReplayRecord

MODES = ("pooled", "separate", "global")
N_SHARDS = 5


@dataclass
class ProfileResult:
    profile: str
    calls: int
    pass_rate: float
    required_pass_rate: float
    teacher_pass_rate: float
    cost_rel: float
    oracle_cost_rel: float
    teacher_share: float
    oracle_teacher_share: float
    fallback_rate: float
    # The same scores with the cheapest threshold meeting the target on these very calls (hindsight,
    # no margin): what the ranking alone allows; the gap to cost_rel is the calibration's price.
    hindsight_cost_rel: float = float("nan")

    @property
    def hindsight_vs_oracle(self) -> float:
        return self.hindsight_cost_rel / self.oracle_cost_rel - 1 if self.oracle_cost_rel else float("nan")

    @property
    def cost_vs_oracle(self) -> float:
        return self.cost_rel / self.oracle_cost_rel - 1 if self.oracle_cost_rel else float("nan")

    @property
    def meets_target(self) -> bool:
        return self.pass_rate >= self.required_pass_rate - 1e-12

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "cost_vs_oracle": self.cost_vs_oracle,
            "hindsight_vs_oracle": self.hindsight_vs_oracle,
            "meets_target": self.meets_target,
        }


def rotations(n_shards: int = N_SHARDS) -> list[Split]:
    """Test shard f, calibration shard f+1, the rest train: every shard is tested once."""
    return [
        Split(
            n_shards=n_shards,
            train=tuple(s for s in range(n_shards) if s not in (f, (f + 1) % n_shards)),
            calibrate=((f + 1) % n_shards,),
            test=(f,),
        )
        for f in range(n_shards)
    ]


def _fit(
    records: Sequence[ReplayRecord],
    x: np.ndarray,
    featurizer: Featurizer,
    *,
    c_grid: tuple[float, ...],
    shrink: float,
    folds: int,
    seed: int,
) -> LearnedRouterModel:
    labels = np.asarray([bool(r.needs_teacher) for r in records], dtype=int)
    groups = np.asarray([r.task_id for r in records])
    return fit_router_model(
        x, labels, groups, spec=featurizer.spec, c_grid=c_grid, folds=folds, seed=seed, shrink=shrink
    )


def _oof(
    models: dict[str, LearnedRouterModel], fit_on: dict[str, list[ReplayRecord]]
) -> list[tuple[ReplayRecord, float]]:
    """(training call, its calibrated out-of-fold score) of every model."""
    out: list[tuple[ReplayRecord, float]] = []
    for key, model in models.items():
        if model.oof_scores is not None:
            out.extend(zip(fit_on[key], model.oof_scores.tolist(), strict=True))
    return out


def _by_profile(records: Sequence[ReplayRecord]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for i, record in enumerate(records):
        out[record.profile].append(i)
    return dict(out)


@dataclass(frozen=True)
class Routed:
    """Every complete call of a replay with its test decision (each call tested once) and score."""

    calls: list[ReplayRecord]
    to_teacher: np.ndarray
    scores: np.ndarray


def evaluate_profiles(
    records: Sequence[ReplayRecord], *, target: Target, **options: Any
) -> list[ProfileResult]:
    """Per profile, the learned policy's numbers on every call (each tested once) and the oracle's;
    ``options`` are :func:`route_every_call`'s."""
    return summarize(route_every_call(records, target=target, **options), target)


def route_every_call(
    records: Sequence[ReplayRecord],
    *,
    featurizer: Featurizer,
    target: Target,
    mode: str = "pooled",
    c_grid: tuple[float, ...] = (0.01, 0.1),
    shrink: float = SHRINK,
    folds: int = 3,
    seed: int = 0,
    cross_fit: bool = True,
) -> Routed:
    """The deployed policy's decision on every complete call, over the shard rotations."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    complete = [r for r in records if r.complete]
    x_all = featurize(complete, featurizer)
    index = {id(r): i for i, r in enumerate(complete)}
    to_teacher = np.zeros(len(complete), dtype=bool)
    test_scores = np.ones(len(complete))
    for split in rotations():
        train, calib, test = split.parts(complete)
        fit_on = {"pooled": {"*": train}, "global": {"*": train}}.get(mode) or {
            p: [train[i] for i in ix] for p, ix in _by_profile(train).items()
        }
        models = {
            key: _fit(
                rs,
                x_all[[index[id(r)] for r in rs]],
                featurizer,
                c_grid=c_grid,
                shrink=shrink,
                folds=folds,
                seed=seed,
            )
            for key, rs in fit_on.items()
            if rs
        }

        def scores(
            rs: Sequence[ReplayRecord], key: str, models: dict[str, LearnedRouterModel] = models
        ) -> np.ndarray:
            model = models.get(key) or models.get("*")
            if model is None:  # a profile with no training calls: always the teacher
                return np.ones(len(rs))
            return model.score_many(x_all[[index[id(r)] for r in rs]])

        groups = (
            {"*": (calib, test)}
            if mode == "global"
            else {
                p: ([calib[i] for i in _by_profile(calib).get(p, [])], [test[i] for i in ix])
                for p, ix in _by_profile(test).items()
            }
        )
        oof = _oof(models, fit_on) if cross_fit else []
        for key, (cal, tst) in groups.items():
            model_key = key if mode == "separate" else "*"
            cal_scores = scores(cal, model_key)
            if cross_fit:  # the training calls' out-of-fold scores join the calibration shard
                extra = [(r, s) for r, s in oof if key == "*" or r.profile == key]
                cal = [*cal, *(r for r, _ in extra)]
                cal_scores = np.concatenate([cal_scores, [s for _, s in extra]])
            if not cal:
                threshold = 0.0  # nothing to calibrate on: the teacher
            else:
                threshold = calibrate(PolicyData.from_records(cal), cal_scores, target).threshold
            tested = scores(tst, model_key)
            for record, score in zip(tst, tested, strict=True):
                to_teacher[index[id(record)]] = score >= threshold
                test_scores[index[id(record)]] = score
    return Routed(complete, to_teacher, test_scores)


def summarize(
    routed: Routed, target: Target, group: Callable[[ReplayRecord], str] = lambda r: r.profile
) -> list[ProfileResult]:
    """The learned policy's and the oracle's numbers per group of calls (by default their profile; the
    thresholds stay per profile, a group only chooses what is reported together)."""
    complete, to_teacher, test_scores = routed.calls, routed.to_teacher, routed.scores
    groups: dict[str, list[int]] = defaultdict(list)
    for i, record in enumerate(complete):
        groups[group(record)].append(i)
    results = []
    for profile, ix in sorted(groups.items()):
        data = PolicyData.from_records([complete[i] for i in ix])
        learned = policy_metrics("learned", data, to_teacher[ix])
        oracle = oracle_metrics(data)
        teacher_rate = float(data.t_ok.mean())
        results.append(
            ProfileResult(
                profile=profile,
                calls=data.n,
                pass_rate=learned.pass_rate,
                required_pass_rate=target.required(teacher_rate),
                teacher_pass_rate=teacher_rate,
                cost_rel=learned.cost_rel,
                oracle_cost_rel=oracle.cost_rel,
                teacher_share=learned.teacher_share,
                oracle_teacher_share=oracle.teacher_share,
                fallback_rate=learned.fallback_rate,
                hindsight_cost_rel=_hindsight_cost(data, test_scores[ix], target),
            )
        )
    return results


def _hindsight_cost(data: PolicyData, scores: np.ndarray, target: Target) -> float:
    """Cost (vs always-teacher) of the cheapest threshold on ``scores`` meeting ``target`` on these
    very calls, with no margin."""
    no_margin = Target(target.pass_rate, target.relative, None, 0.0)
    return calibrate(data, np.asarray(scores, dtype=np.float64), no_margin).chosen.cost_rel


def hindsight_vs_oracle(
    records: Sequence[ReplayRecord], scores: Sequence[float], target: Target
) -> dict[str, float]:
    """Per profile, the cost over the oracle of routing by ``scores`` (higher: the teacher) with the
    cheapest threshold meeting ``target`` on these very calls: what a ranking allows, before any
    calibration margin. With a generator's own log-odds as the scores, no router that sees only the
    content can do better (its per-call noise is what the oracle knows and no content shows)."""
    complete = [(r, s) for r, s in zip(records, scores, strict=True) if r.complete]
    out: dict[str, float] = {}
    for profile, ix in sorted(_by_profile([r for r, _ in complete]).items()):
        data = PolicyData.from_records([complete[i][0] for i in ix])
        cost = _hindsight_cost(data, np.asarray([complete[i][1] for i in ix]), target)
        oracle = oracle_metrics(data).cost_rel
        out[profile] = cost / oracle - 1 if oracle else float("nan")
    return out


def markdown(results: Sequence[ProfileResult]) -> str:
    lines = [
        "| profile | calls | pass (required) | cost vs teacher | oracle cost | vs oracle "
        "| hindsight vs oracle | teacher share (oracle) | fallback |",
        "|---|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        flag = "" if r.meets_target else " **missed**"
        lines.append(
            f"| {r.profile} | {r.calls} | {r.pass_rate:.1%} ({r.required_pass_rate:.1%}){flag} | "
            f"{r.cost_rel:.3f} | {r.oracle_cost_rel:.3f} | {r.cost_vs_oracle:+.1%} | "
            f"{r.hindsight_vs_oracle:+.1%} | "
            f"{r.teacher_share:.0%} ({r.oracle_teacher_share:.0%}) | {r.fallback_rate:.1%} |"
        )
    return "\n".join(lines)
