"""Recalibration with a slope (routing/router/versions/recalibration.py, issue 38): where the traffic
changed the slope of the student's odds on the version's score, not only their level, labels that carry
the version's score fit an intercept and a slope; the bound the chosen threshold meets holds at every
look of the drift check; with few scored labels the one-parameter offset is fitted as before."""

from __future__ import annotations

import math

import numpy as np
import pytest

from routing.models import RouterVersion
from routing.router.versions import recalibration
from routing.router.versions.recalibration import (
    MIN_LABELS,
    SLOPE_LABELS,
    WORSE,
    Group,
    curve_of,
    fall,
    fit_line,
    recalibrate,
    scored_groups,
)
from routing.router.versions.refit import groups_of, refitted
from tests.support.recalibration import active_version, calibrated

# the student's log-odds on the traffic now: 2.2 + 0.1 x (was 1 x) the log-odds its score gives
INTERCEPT, SLOPE = 2.2, 0.1


@pytest.fixture(scope="module")
def calibration() -> dict:
    """A version calibrated on 3000 calls whose score is the student's true odds of a wrong answer."""
    return calibrated()


scores_now = np.random.default_rng(1).beta(0.6, 2.5, 200_000)


def student_odds(scores: np.ndarray) -> np.ndarray:
    """The student's rate of right answers now, on calls of these scores (the slope changed)."""
    return 1.0 / (1.0 + np.exp(-(INTERCEPT + SLOPE * np.log((1 - scores) / scores))))


def served_pass(threshold: float) -> float:
    """The policy's true pass rate now at ``threshold`` (the teacher right 0.98 of the time)."""
    return float(np.mean(np.where(scores_now >= threshold, 0.98, student_odds(scores_now))))


def student_rate(threshold: float) -> float:
    below = scores_now[scores_now < threshold]
    return float(student_odds(below).mean())


def labelled(threshold: float, count: int) -> tuple[list[bool], list[float | None]]:
    """``count`` student answers served below ``threshold``, labelled at the changed odds, with scores."""
    scores = scores_now[scores_now < threshold][:count]
    labels = np.random.default_rng(3).random(count) < student_odds(scores)
    return [bool(x) for x in labels], [float(s) for s in scores]


def test_a_changed_slope_is_fitted_and_its_threshold_meets_the_target(calibration) -> None:
    t, required = calibration["threshold"], calibration["required_pass_rate"]
    labels, scores = labelled(t, 600)
    assert served_pass(t) < required  # the version as admitted misses the target now
    found, why = recalibrate(calibration, scored_groups(calibration, t, labels, scores), WORSE, t)
    assert found is not None, why
    assert found.fit.dims == 2 and abs(found.fit.slope - SLOPE) < 0.15 and "slope" in why
    assert served_pass(found.threshold) >= required
    # its prediction of the student's answers where it now serves is right, within a point
    assert abs(found.chosen["student_pass_rate"] - student_rate(found.threshold)) < 0.01
    # the one offset on the same labels (what was fitted before) promises more than it serves: it
    # moves the threshold less and misses the target
    offset, _ = recalibrate(calibration, [Group(t, len(labels), sum(labels))], WORSE, t)
    assert offset is not None and offset.fit.dims == 1
    assert offset.threshold > found.threshold and served_pass(offset.threshold) < required
    assert offset.chosen["student_pass_rate"] - student_rate(offset.threshold) > 0.01


def test_few_scored_labels_fit_the_offset_alone(calibration) -> None:
    t, curve = calibration["threshold"], curve_of(calibration)
    assert curve is not None
    labels, scores = labelled(t, SLOPE_LABELS - 1)
    fit = fit_line(curve, scored_groups(calibration, t, labels, scores))
    assert fit.dims == 1 and fit.slope == 1.0
    # labels that match the prediction show no slope, however many
    below = scores_now[scores_now < t][:2000]
    same = np.random.default_rng(4).random(len(below)) < 1 - below
    fit = fit_line(curve, scored_groups(calibration, t, [bool(x) for x in same], [float(s) for s in below]))
    assert fit.dims == 1 and fit.lower < 0 < fit.upper


def test_the_bound_holds_at_every_look() -> None:
    """The set ``fall`` draws keeps the true rate at every look (a look every 5 labels, 400 labels), in
    all but the target's two-sided level of streams; the fixed z^2 / 2 of one look loses it far more
    often. A rate with its own maximum likelihood: the fall at the truth is n KL(rate seen || truth)."""
    rng = np.random.default_rng(11)
    truth, streams, count = 0.9, 4000, 400
    right = np.cumsum(rng.random((streams, count)) < truth, axis=1)[:, 4::5]
    n = np.arange(5, count + 1, 5, dtype=float)
    seen = np.clip(right / n, 1e-12, 1 - 1e-12)
    gap = n * (seen * np.log(seen / truth) + (1 - seen) * np.log((1 - seen) / (1 - truth)))
    level = math.erfc(1 / math.sqrt(2))  # z = 1: 0.317
    bound = np.asarray([fall(int(k), 1, 1.0) for k in n])
    assert float(np.mean((gap > bound).any(axis=1))) <= level
    assert float(np.mean((gap > 0.5).any(axis=1))) > 2 * level


def test_a_stored_recalibration_keeps_its_scored_groups(calibration) -> None:
    t = calibration["threshold"]
    labels, scores = labelled(t, 600)
    version = RouterVersion(calibration=calibration, threshold=t)
    refit, why = refitted(version, labels, WORSE, scores)
    assert refit is not None, why
    stored = refit["recalibrated"]["groups"]
    assert len(stored) > 2 and all("score" in g for g in stored)
    version.calibration = refit
    again = groups_of(version, [True] * MIN_LABELS)
    assert sum(g.score is not None for g in again) == len(stored) and again[-1].score is None
    assert again[-1] == Group(refit["recalibrated"]["threshold"], MIN_LABELS, MIN_LABELS)
    # a label whose score is not known joins the stratum group of its threshold
    mixed = scored_groups(calibration, t, [True, False, True], [0.01, None])
    assert [g.labels for g in mixed if g.score is None] == [2] and sum(g.labels for g in mixed) == 3
    assert recalibration.scored_groups(None, t, [True], [0.5]) == [Group(t, 1, 1)]


@pytest.mark.django_db
def test_the_drift_check_fits_the_slope_on_the_scores_the_ledger_kept(settings, calibration) -> None:
    """Live: each call's row keeps the router's score; the student's answers are right 71 of 80 times
    (1.5 + 0.1 x the log-odds of the score), the correctness test decides drift, and the refit reads the
    labels in their score bins: a slope is fitted and stored with its groups, by bin."""
    from routing.router.versions.drift import router_version_drift_check
    from tests.factories import ApiKeyFactory, InvocationFactory
    from tests.support.ledger import leg

    profile, version = active_version(settings, calibration, "sloped")
    t = calibration["threshold"]
    key = ApiKeyFactory.create()
    scores = scores_now[scores_now < t][:80]
    odds = 1.0 / (1.0 + np.exp(-(1.5 + 0.1 * np.log((1 - scores) / scores))))
    right = np.random.default_rng(3).random(len(scores)) < odds
    for score, ok in zip(scores, right, strict=True):
        InvocationFactory.create(
            api_key=key,
            profile=profile,
            request={"messages": [{"role": "user", "content": "Read the total."}]},
            legs=[leg("student", "pass", correct=bool(ok)), leg("teacher", "pass", background=True)],
            route="student",
            served_by="student",
            verdict="pass",
            router_version=version,
            prompt_tokens=200,
            score=float(score),
        )
    version = router_version_drift_check(version=version)
    reason = version.drift_reason
    assert not version.drift_flag and reason.startswith("recalibrated (worse"), reason
    assert f"{int(right.sum())} of 80 labelled answers right: slope" in reason
    again = version.calibration["recalibrated"]
    assert again["fit"]["dims"] == 2 and again["threshold"] < t
    assert len(again["groups"]) > 2 and all("score" in g for g in again["groups"])
