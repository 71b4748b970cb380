"""The calibration margin is sized to the calibration set: confidence bounds, larger for fewer calls."""

from __future__ import annotations

import numpy as np
import pytest

from routing.router.learning.calibration import (
    PolicyData,
    Target,
    binomial_lower,
    binomial_upper,
    calibrate,
    one_sided_alpha,
    paired_difference_lower,
    sweep,
)
from routing.router.learning.records import Outcome, ReplayRecord


def test_clopper_pearson_bounds():
    alpha = one_sided_alpha(1.0)
    assert alpha == pytest.approx(0.1587, abs=1e-4)
    # no failure in n trials: the upper bound solves (1 - p)^n = alpha
    for n in (10, 100, 1000):
        assert binomial_upper(np.array([0]), np.array([n]), alpha)[0] == pytest.approx(1 - alpha ** (1 / n))
    uppers = binomial_upper(np.array([1, 10, 100]), np.array([10, 100, 1000]), alpha)
    assert (np.diff(uppers) < 0).all() and (uppers > 0.1).all()  # the same 10%: tighter with more trials
    lowers = binomial_lower(np.array([1, 10, 100]), np.array([10, 100, 1000]), alpha)
    assert (np.diff(lowers) > 0).all() and (lowers < 0.1).all()
    assert binomial_lower(np.array([0]), np.array([50]), alpha)[0] == 0.0
    assert binomial_upper(np.array([0]), np.array([0]), alpha)[0] == 0.0  # no trial, no loss


def test_paired_difference_bound_values():
    alpha = one_sided_alpha(1.0)
    k, none, m = np.array([10]), np.array([0]), np.array([100])
    up, low = binomial_upper(k, m, alpha)[0], binomial_lower(k, m, alpha)[0]
    up0 = binomial_upper(none, m, alpha)[0]
    # only gains: no correlation, the two exact distances add as variances
    assert paired_difference_lower(none, k, m, alpha)[0] == pytest.approx(0.1 - np.hypot(0.1 - low, up0))
    # only losses: the lower bound of no gain is 0, so the width is the loss's own exact distance
    assert paired_difference_lower(k, none, m, alpha)[0] == pytest.approx(-0.1 - (up - 0.1))
    # both: narrower than the two exact bounds' difference, wider than either distance alone
    both = paired_difference_lower(k, k, m, alpha)[0]
    assert low - up < both < -(up - 0.1)
    assert paired_difference_lower(none, none, np.array([0]), alpha)[0] == 0.0  # no call


@pytest.mark.parametrize(
    ("loss_rate", "gain_rate", "m"),
    [(0.10, 0.10, 100), (0.05, 0.01, 300), (0.02, 0.0, 200), (0.03, 0.03, 680), (0.2, 0.05, 50)],
)
def test_paired_difference_bound_covers_at_its_confidence(loss_rate, gain_rate, m):
    """Drawn from known rates, the z=1 bound lies below the true difference in at least its 84% of the
    samples, and where both kinds occur in fewer than 92% (the separate bounds': 93-94%)."""
    rng = np.random.default_rng(7)
    draws = rng.multinomial(m, [loss_rate, gain_rate, 1 - loss_rate - gain_rate], size=20_000)
    alpha = one_sided_alpha(1.0)
    bounds = paired_difference_lower(draws[:, 0], draws[:, 1], np.full(len(draws), m), alpha)
    coverage = float(np.mean(bounds <= gain_rate - loss_rate))
    assert coverage >= 1 - alpha
    if gain_rate > 0:
        assert coverage < 0.92


def calls(copies: int) -> PolicyData:
    """A block of 50 calls repeated ``copies`` times: the same rates, a set ``copies`` times larger.
    Per block, 10 student failures (ranked first by ``scores``) and 40 successes, one of them a
    call the teacher gets wrong; no verifier, so no fallback."""
    records = []
    for c in range(copies):
        for i in range(50):
            wrong = i < 10
            student = Outcome("unverified", not wrong, 0.04, 100)
            teacher = Outcome("unverified", i != 49, 1.0, 1000)  # the teacher misses one in 50
            records.append(
                ReplayRecord(
                    f"{c}-{i}", f"t{c}-{i}", "p", {"messages": []}, False, 0, False, student, teacher
                )
            )
    return PolicyData.from_records(records)


def scores(data: PolicyData) -> np.ndarray:
    block = np.concatenate([np.linspace(0.9, 0.8, 10), np.linspace(0.5, 0.01, 40)])
    return np.tile(block, data.n // 50)


@pytest.mark.parametrize("relative", [True, False])
def test_a_smaller_set_gets_a_larger_margin(relative):
    target = Target(0.98 if relative else 0.97, relative, None, 1.0)
    margins, costs = [], []
    for copies in (1, 4, 40):
        data = calls(copies)
        curve = sweep(data, scores(data), target)
        at_oracle = next(p for p in curve if p.teacher_share == pytest.approx(0.2))  # the 10 failures
        margins.append(at_oracle.margin)
        costs.append(calibrate(data, scores(data), target).chosen.cost_usd)
    # the same rates, so the same point estimate; the bound approaches it as the set grows
    assert margins[0] < margins[1] < margins[2]
    assert costs[0] >= costs[1] - 1e-12 and costs[1] >= costs[2] - 1e-12
    assert margins[2] >= 0 > margins[0]  # 50 calls cannot show what 2,000 do


def test_point_estimate_and_always_teacher():
    data = calls(1)
    point = sweep(data, scores(data), Target(0.98, True, None, 0.0))
    at_oracle = next(p for p in point if p.teacher_share == pytest.approx(0.2))
    # gains (the teacher's one miss, answered right by the student) minus losses, plus the slack
    assert at_oracle.margin == pytest.approx(0.02 * 49 / 50 + 1 / 50)
    bounded = sweep(data, scores(data), Target(0.98, True, None, 3.0))
    assert bounded[-1].teacher_share == 1.0 and bounded[-1].meets_quality  # the reference itself
    assert calibrate(data, scores(data), Target(0.98, True, None, 3.0)).met
