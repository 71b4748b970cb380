"""Recalibration on labelled samples (routing/router/versions/recalibration.py, issue 38): the log-odds
offset fitted on a version's labelled answers, and the cheapest threshold whose bound meets the target,
in both directions; few labels change nothing."""

from __future__ import annotations

import pytest

from routing.models import RouterVersion
from routing.router.versions.recalibration import (
    BETTER,
    MIN_LABELS,
    WORSE,
    Group,
    better_shown,
    curve_of,
    fit_offset,
    recalibrate,
)
from routing.router.versions.refit import groups_of, refitted, serving_point, serving_threshold
from tests.support.recalibration import active_version, calibrated


@pytest.fixture(scope="module")
def calibration() -> dict:
    """A version calibrated on 3000 calls whose score is the student's true odds of a wrong answer."""
    return calibrated()


def chosen_rate(calibration: dict) -> float:
    return float(calibration["chosen"]["student_pass_rate"])


def test_the_fit_finds_no_offset_where_the_labels_match_the_prediction(calibration) -> None:
    curve = curve_of(calibration)
    assert curve is not None
    q0, t = chosen_rate(calibration), calibration["threshold"]
    fit = fit_offset(curve, [Group(t, 1000, round(1000 * q0))])
    assert abs(fit.delta) < 0.3 and fit.lower < 0 < fit.upper


def test_worse_than_predicted_serves_a_lower_threshold_with_its_bound_meeting_the_target(calibration) -> None:
    q0, t = chosen_rate(calibration), calibration["threshold"]
    right = round(200 * (q0 - 0.06))
    found, why = recalibrate(calibration, [Group(t, 200, right)], WORSE, t)
    assert found is not None, why
    assert found.fit.upper < 0 and found.threshold < t
    assert found.chosen["margin"] >= -1e-12
    assert found.chosen["student_served_share"] < calibration["chosen"]["student_served_share"]
    assert found.chosen["pass_rate"] >= calibration["required_pass_rate"] - 1e-12
    assert "worse than predicted" in why and f"{right} of 200" in why


def test_far_worse_than_predicted_leaves_the_student_no_more_than_the_targets_slack(calibration) -> None:
    t = calibration["threshold"]
    found, why = recalibrate(calibration, [Group(t, 200, 0)], WORSE, t)
    assert found is not None and found.fit.lower == -12.0
    wrong = found.chosen["student_served_share"] * (1 - found.chosen["student_pass_rate"])
    assert wrong <= 1 - 0.98 and found.chosen["margin"] >= -1e-12
    # a target with no slack (as much as always-teacher): only the teacher meets it
    strict = {**calibration, "required_pass_rate": 1.0}
    found, why = recalibrate(strict, [Group(t, 200, 0)], WORSE, t)
    assert found is None and "only the teacher" in why


def test_better_than_predicted_routes_more_to_the_student(calibration) -> None:
    t = calibration["threshold"]
    found, why = recalibrate(calibration, [Group(t, 400, 400)], BETTER, t)
    assert found is not None, why
    assert found.fit.lower > 0 and found.threshold > t
    assert found.chosen["cost_usd"] < calibration["chosen"]["cost_usd"]
    assert found.chosen["margin"] >= -1e-12
    # as predicted: no cheaper threshold at the bound
    q0 = chosen_rate(calibration)
    same, why = recalibrate(calibration, [Group(t, 400, round(400 * q0))], BETTER, t)
    assert same is None and "no cheaper threshold" in why


def test_few_labels_change_nothing(calibration) -> None:
    t = calibration["threshold"]
    for right in (0, MIN_LABELS - 1):
        found, why = recalibrate(calibration, [Group(t, MIN_LABELS - 1, right)], WORSE, t)
        assert found is None and f"needs {MIN_LABELS}" in why
    assert not better_shown([True] * (MIN_LABELS - 1), 0.5)
    assert better_shown([True] * 200, 0.9) and not better_shown([True] * 180 + [False] * 20, 0.9)
    assert curve_of({}) is None and recalibrate({}, [Group(t, 100, 50)], WORSE, t)[0] is None


def test_a_version_serves_at_its_recalibrated_threshold_and_refits_on_all_its_groups(calibration) -> None:
    t = calibration["threshold"]
    version = RouterVersion(calibration=calibration, threshold=t)
    assert serving_threshold(version) == t and serving_point(version) == calibration["chosen"]
    labels = [True] * 150 + [False] * 50
    refit, _ = refitted(version, labels, WORSE)
    assert refit is not None and refit["recalibrated"]["groups"] == [
        {"threshold": t, "labels": 200, "right": 150}
    ]
    version.calibration = refit
    lower = serving_threshold(version)
    assert lower is not None and lower < t and version.threshold == t
    assert serving_point(version)["measured_on"] == 200
    groups = groups_of(version, [True] * 10)
    assert groups == [Group(t, 200, 150), Group(lower, 10, 10)]
    # hostile stored groups are dropped, not trusted
    version.calibration = {**refit, "recalibrated": {**refit["recalibrated"], "groups": [{"labels": "x"}, 3]}}
    assert groups_of(version, []) == [Group(lower, 0, 0)]


@pytest.mark.django_db
def test_the_drift_check_serves_a_version_worse_than_predicted_recalibrated_instead_of_stopping_it(
    settings, calibration
) -> None:
    """Live: its own answers right 3 times in 4 against 0.98 predicted, the correctness test decides
    drift; re-fitted on those labels, a lower threshold meets the target at the fit's bound, so the
    version routes on there (a fresh live window, the router at the recalibrated threshold), not stopped."""
    from routing.router.policies import _active_version
    from routing.router.versions.drift import router_version_drift_check
    from tests.factories import ApiKeyFactory
    from tests.routing.router.test_drift import _live_call

    profile, version = active_version(settings, calibration, "recalibrated")
    t = calibration["threshold"]
    key = ApiKeyFactory.create()
    for i in range(40):
        _live_call(profile, key, version, correct=i % 4 != 0)
    activated = version.activated_at
    version = router_version_drift_check(version=version)
    assert not version.drift_flag and version.drift_reason.startswith("recalibrated (worse"), (
        version.drift_reason
    )
    assert "30 of 40 labelled answers right" in version.drift_reason
    again = version.calibration["recalibrated"]
    assert again["threshold"] < t and again["groups"] == [{"threshold": t, "labels": 40, "right": 30}]
    assert version.activated_at is not None and (activated is None or version.activated_at > activated)
    active = _active_version(profile.pk)
    assert active.threshold == again["threshold"] and active.admitted == t and not active.drift


@pytest.mark.django_db
def test_a_recalibration_queues_a_retrain_and_alerts_once(settings, calibration, monkeypatch) -> None:
    """The task around the check: re-fitted, the version serves on, and the traffic that moved it is
    learned (a retrain queued, the drift alerted, the new traffic's start recorded for its admission);
    the next check, with nothing re-fitted, queues nothing more."""
    from routing import tasks
    from routing.router.versions import profile_drift
    from tests.factories import ApiKeyFactory
    from tests.routing.router.test_drift import _live_call

    retrains: list[int] = []
    alerted: list[object] = []
    monkeypatch.setattr(tasks.router_retrain, "delay", retrains.append)
    monkeypatch.setattr(tasks.alerts, "notify", alerted.append)
    profile, version = active_version(settings, calibration, "recalibrated-retrain")
    key = ApiKeyFactory.create()
    for i in range(40):
        _live_call(profile, key, version, correct=i % 4 != 0)
    assert profile_drift.since_of(profile.pk) is None
    assert tasks.router_drift_check(version.pk) is False
    version.refresh_from_db()
    assert version.calibration.get("recalibrated"), version.drift_reason
    assert retrains == [profile.pk] and len(alerted) == 1
    assert profile_drift.since_of(profile.pk) is not None
    assert tasks.router_drift_check(version.pk) is False  # a fresh window: too few live calls to judge
    assert retrains == [profile.pk] and len(alerted) == 1
