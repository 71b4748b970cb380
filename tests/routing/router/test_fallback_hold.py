"""The hold of a profile no router version routes (``profile_drift``, ``drift.Judgement.hold``): its
fixed fallback's cost drifts while the correctness test leans towards drift without deciding. The
teacher serves, with sampling raised, until the fallback is measured again on the new traffic; cost
drift alone keeps the same fallback serving."""

from __future__ import annotations

import pytest

from routing import tasks
from routing.access import lookups
from routing.models import ProfileDrift, RouterVersion
from routing.router.versions.drift import HELD, ROUTING
from routing.router.versions.truth import fixed_choice
from tests.factories import ApiKeyFactory, RouterVersionFactory
from tests.routing.router.test_profile_drift import CASCADE, TEACHER, _call, _configure, _route
from tests.support.ledger import learned_profile

pytestmark = pytest.mark.django_db


def _measured_cascade(settings, monkeypatch, name: str):
    _configure(settings)
    monkeypatch.setattr(tasks.router_retrain, "delay", lambda pk: None)
    profile = learned_profile(name=name, target=0.9)
    RouterVersionFactory.create(profile=profile, number=1, status=RouterVersion.Status.REJECTED)
    key = ApiKeyFactory.create()
    for _ in range(30):
        _call(profile, key)
    assert not tasks.router_profile_drift_check(profile.pk)
    state = ProfileDrift.objects.get(profile=profile)
    assert state.baseline["policy"] == CASCADE and state.since is None, state.reason
    return profile, key


def test_cost_drift_with_correctness_in_doubt_holds_the_fallback_until_it_is_measured_again(
    settings, monkeypatch
):
    profile, key = _measured_cascade(settings, monkeypatch, "held")
    for i in range(20):  # half fall back (cost and fallback rate drift); 1 of the 10 served answers wrong
        _call(profile, key, fell_back=i % 2 == 0, correct=i != 1)

    assert tasks.router_profile_drift_check(profile.pk)
    state = ProfileDrift.objects.get(profile=profile)
    assert state.reason.startswith(HELD), state.reason
    assert "correctness" in state.reason and "suspected" in state.reason  # leaning, not decided
    assert state.since is not None and state.baseline == {}
    choice = fixed_choice(profile)
    assert choice.policy == TEACHER and choice.unmeasured  # the calls before no longer vouch for it
    decision = _route(profile)
    assert decision.route == "teacher" and decision.sample_boost > 1

    for _ in range(20):  # the teacher serves; the raised student samples label the new traffic
        _call(profile, key, policy=TEACHER, correct=True)
    choice = fixed_choice(profile)  # measured again on the new traffic only: the student is right there
    assert choice.policy == CASCADE and not choice.unmeasured, choice.reason
    lookups.clear()  # the gateway reads the fixed fallback once per lookup TTL
    assert _route(profile).route == "student"
    for _ in range(20):  # the cascade serves again; once its own calls are labelled, the hold ends
        _call(profile, key)
    assert not tasks.router_profile_drift_check(profile.pk)
    state.refresh_from_db()
    assert not state.flag and "recovered" in state.reason, state.reason
    assert state.baseline["policy"] == CASCADE


def test_cost_drift_with_correct_answers_keeps_the_fallback_serving(settings, monkeypatch):
    profile, key = _measured_cascade(settings, monkeypatch, "dearer")
    for i in range(20):  # the same fallbacks, every served answer right
        _call(profile, key, fell_back=i % 2 == 0)

    assert tasks.router_profile_drift_check(profile.pk)
    state = ProfileDrift.objects.get(profile=profile)
    assert state.reason.startswith(ROUTING), state.reason
    assert state.since is None  # not held: the cascade's measure still stands
    assert fixed_choice(profile).policy == CASCADE
    assert _route(profile).route == "student"
