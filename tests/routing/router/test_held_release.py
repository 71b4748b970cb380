"""A held version (``drift.HELD``: correctness leaning towards drift while its teacher share drifted) serves
nothing, so its own answers stop being labelled. It is measured again on the student answers background
samples label on the calls the safe fixed policy serves (``drift.held_labels``): those it would have left
to the student. Right ones release it without a retrain; wrong ones decide drift."""

from __future__ import annotations

import pytest

from routing.models import Invocation, RouterVersion, TaskProfile
from routing.router.learning.features import hashing_spec
from routing.router.learning.runtime import forget_routers
from routing.router.policies import _active_version
from routing.router.versions.drift import HELD, ROUTING, held_labels, is_held, router_version_drift_check
from routing.router.versions.services import router_version_admit, router_version_train
from tests.factories import ApiKeyFactory, InvocationFactory
from tests.routing.router.test_drift import _live_call, _teacher_call
from tests.support.ledger import easy, fill, hard, learned_profile, leg

pytestmark = pytest.mark.django_db


def _fallback_call(profile: TaskProfile, key, text: str, *, correct: bool) -> Invocation:
    """A call the safe fixed policy (the teacher) served while the version was held; a background
    student sample's comparison labelled the student's answer."""
    return InvocationFactory.create(
        api_key=key,
        profile=profile,
        request={"messages": [{"role": "user", "content": text}]},
        legs=[leg("teacher", "pass"), leg("student", "pass", background=True, correct=correct)],
        route="teacher",
        served_by="teacher",
        policy="always_teacher",
        verdict="pass",
        prompt_tokens=200,
    )


def _held_version(settings) -> tuple[RouterVersion, TaskProfile, object]:
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 10},
    }
    forget_routers()
    profile = learned_profile(name="held")
    fill(profile)
    version = router_version_admit(
        version=router_version_train(profile=profile, spec=hashing_spec(ngram_dims=256))
    )
    assert version.status == RouterVersion.Status.ACTIVE, version.status_reason
    chosen = {"student_served_share": 1.0, "student_pass_rate": 0.95, "pass_rate": 0.95}
    RouterVersion.objects.filter(pk=version.pk).update(
        calibration={"chosen": chosen}, predicted_teacher_share=0.0
    )
    version.refresh_from_db()
    key = ApiKeyFactory.create()
    for i in range(10):  # two calls in three to the teacher (teacher share drifts), 0.8 right: suspected
        _live_call(profile, key, version, correct=i % 5 != 0)
        _teacher_call(profile, key, version)
        _teacher_call(profile, key, version)
    version = router_version_drift_check(version=version)
    assert version.drift_reason.startswith(HELD), version.drift_reason
    return version, profile, key


def test_a_held_version_is_released_when_the_answers_it_would_have_served_are_right(settings):
    version, profile, key = _held_version(settings)
    for i in range(100):  # the teacher serves; the raised student samples label easy and hard calls
        _fallback_call(profile, key, easy(7000 + i), correct=True)
        _fallback_call(profile, key, hard(7000 + i), correct=False)  # it would send these to the teacher
    labels = held_labels(version)
    assert 90 <= len(labels) <= 110 and all(labels)  # the easy ones it would have served, not the hard

    version = router_version_drift_check(version=version)

    assert version.drift_reason.startswith(ROUTING), version.drift_reason
    assert not is_held(version.drift_flag, version.drift_reason)
    active = _active_version(profile.pk)
    assert active.pk == version.pk and not active.drift  # it routes again, without a retrain


def test_a_held_version_whose_would_be_answers_are_wrong_drifts(settings):
    version, profile, key = _held_version(settings)
    for i in range(30):
        _fallback_call(profile, key, easy(7000 + i), correct=i % 2 == 0)

    version = router_version_drift_check(version=version)

    assert version.drift_flag and "correctness" in version.drift_reason, version.drift_reason
