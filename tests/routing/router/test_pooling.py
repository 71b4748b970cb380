"""Pooling across profiles: a profile with a few labelled calls leans on what the others show."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from bench.router_data.synthetic import generate
from routing.router.learning.calibration import Target
from routing.router.learning.evaluate import featurize
from routing.router.learning.features import hashing_spec, make_featurizer
from routing.router.learning.model import _standardizer, fit_router_model
from routing.router.learning.profiles import (
    evaluate_profiles,
    hindsight_vs_oracle,
    rotations,
    route_every_call,
    summarize,
)
from routing.router.learning.records import Outcome, ReplayRecord


def tool(required: int) -> dict:
    props = {f"a{i}": {"type": "string"} for i in range(6)}
    return {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": props, "required": list(props)[:required]},
        },
    }


def replay(profile: str, n: int, seed: int) -> list[ReplayRecord]:
    """The student fails when a call has more than three required arguments (and on 5% of the rest)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        required = int(rng.integers(1, 7))
        wrong = required > 3 or rng.random() < 0.05
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"], size=5))
        request = {"messages": [{"role": "user", "content": f"{profile} {words}"}], "tools": [tool(required)]}
        out.append(
            ReplayRecord(
                f"{profile}-{seed}-{i}",
                f"{profile}-{seed}-{i}",
                profile,
                request,
                False,
                0,
                False,
                Outcome("unverified", not wrong, 0.04, 100),
                Outcome("unverified", True, 1.0, 1000),
            )
        )
    return out


def test_a_profile_with_few_labels_borrows_the_shared_structure():
    featurizer = make_featurizer(hashing_spec(ngram_dims=64))
    big, few, test = replay("big", 300, 1), replay("few", 16, 2), replay("few", 200, 3)

    def auc(train: list[ReplayRecord]) -> float:
        x = featurize(train, featurizer)
        y = np.asarray([bool(r.needs_teacher) for r in train], dtype=int)
        model = fit_router_model(x, y, np.arange(len(train)), spec=featurizer.spec, c_grid=(0.1,), shrink=2.0)
        labels = [bool(r.needs_teacher) for r in test]
        return float(roc_auc_score(labels, model.score_many(featurize(test, featurizer))))

    pooled, alone = auc(big + few), auc(few)
    assert pooled > 0.9
    assert pooled > alone + 0.05


def test_profile_deviations_cost_more_than_shared_coefficients():
    spec = hashing_spec(ngram_dims=8)
    x = np.random.default_rng(0).random((200, spec.dims))
    sizes = spec.block_sizes
    _, plain = _standardizer(x, spec, shrink=1.0)
    _, shrunk = _standardizer(x, spec, shrink=3.0)
    inter = slice(sizes["meta"] + sizes["profile"], sizes["meta"] + sizes["profile"] + sizes["inter"])
    meta_std = x[:, : sizes["meta"]].std(axis=0)
    assert np.allclose(plain[inter], np.tile(meta_std, sizes["profile"]))  # the shared feature's spread
    assert np.allclose(shrunk[inter], 3.0 * plain[inter])


def test_rotations_test_every_shard_once():
    splits = rotations()
    assert sorted(s.test[0] for s in splits) == list(range(5))
    for s in splits:
        assert not set(s.test) & set(s.calibrate) and not (set(s.test) | set(s.calibrate)) & set(s.train)


@pytest.mark.slow
def test_per_profile_thresholds_meet_the_target_on_every_profile():
    featurizer = make_featurizer(hashing_spec(ngram_dims=256))
    records = generate(1500, regime="strong_verifier", seed=5)
    rows = evaluate_profiles(
        records, featurizer=featurizer, target=Target(0.95, True, None, 1.0), c_grid=(0.1,)
    )
    assert {r.profile for r in rows} == {r.profile for r in records}
    assert sum(r.calls for r in rows) == len(records)
    assert all(r.meets_target for r in rows), [r.to_json() for r in rows]
    assert all(r.cost_rel < 1.0 for r in rows)  # and saves on each
    for r in rows:  # the hindsight threshold: the cheapest single one meeting the target on these calls
        assert 0 < r.hindsight_cost_rel <= 1.0 + 1e-9


def test_hindsight_costs_follow_the_ranking():
    records = [r for r in generate(1200, regime="no_verifier", seed=3) if r.complete]
    target = Target(0.98, True, None, 1.0)
    perfect = hindsight_vs_oracle(records, [float(r.needs_teacher) for r in records], target)
    content = hindsight_vs_oracle(records, [-float(r.meta["logit"]) for r in records], target)
    blind = hindsight_vs_oracle(records, [0.0] * len(records), target)  # one score: all or nothing
    assert set(perfect) == set(content) == set(blind) == {r.profile for r in records}
    for profile in perfect:
        # knowing each outcome is never dearer than the oracle (the same calls to the teacher, at most)
        assert perfect[profile] <= 1e-9
        # a ranking that carries the content saves on a score that carries nothing (always the teacher)
        assert content[profile] < blind[profile]
        assert blind[profile] > 0


def test_the_same_decisions_reported_per_group_add_up_to_the_profiles():
    """Reporting per category (e.g. BFCL's) regroups the per-profile decisions; it changes none of them."""
    featurizer = make_featurizer(hashing_spec(ngram_dims=256))
    records = generate(800, regime="mixed", seed=9)
    target = Target(0.95, True, None, 1.0)
    routed = route_every_call(records, featurizer=featurizer, target=target, c_grid=(0.1,))
    profiles = {r.profile: r for r in summarize(routed, target)}
    halves = summarize(routed, target, lambda r: f"{r.profile} / {sum(map(ord, r.task_id)) % 2}")
    assert len(halves) == 2 * len(profiles)
    for name, row in profiles.items():
        parts = [h for h in halves if h.profile.startswith(f"{name} / ")]
        assert sum(p.calls for p in parts) == row.calls
        assert sum(p.pass_rate * p.calls for p in parts) == pytest.approx(row.pass_rate * row.calls)
        assert sum(p.teacher_share * p.calls for p in parts) == pytest.approx(row.teacher_share * row.calls)
