"""The recalibration tests' common ground (tests/routing/test_recalibration*.py): a version calibrated on
3000 calls whose score is the student's true odds of a wrong answer, and that version active on a learned
profile whose drift check runs after 10 calls."""

from __future__ import annotations

import numpy as np

from routing.models import RouterVersion, TaskProfile
from routing.router.learning.calibration import PolicyData, Target, calibrate
from routing.router.learning.runtime import forget_routers
from tests.factories import RouterVersionFactory
from tests.support.ledger import learned_profile


def calibrated() -> dict:
    """A version calibrated on 3000 calls whose score is the student's true odds of a wrong answer."""
    rng = np.random.default_rng(7)
    n = 3000
    scores = rng.beta(0.6, 2.5, n)
    s_ok = rng.random(n) < 1 - scores
    t_ok = rng.random(n) < 0.98
    data = PolicyData(
        s_ok, t_ok, np.full(n, 0.1), np.full(n, 1.0), np.ones(n), np.ones(n), np.zeros(n, bool), ~s_ok
    )
    return calibrate(data, scores, Target(0.98, True, None, 1.0)).to_json()


def active_version(settings, calibration: dict, name: str) -> tuple[TaskProfile, RouterVersion]:
    """Version 1 of a learned profile ``name``, active at ``calibration``'s threshold, its drift
    decided after 10 calls (``settings`` is pytest-django's fixture)."""
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 10},
    }
    forget_routers()
    profile = learned_profile(name=name)
    version = RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.ACTIVE,
        threshold=calibration["threshold"],
        calibration=calibration,
        predicted_pass_rate=calibration["chosen"]["pass_rate"],
        predicted_teacher_share=calibration["chosen"]["teacher_share"],
    )
    return profile, version
