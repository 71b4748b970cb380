"""Issue 38: a drift episode ends, and a retrain checks before it spends.

``ProfileDrift.since`` (the shift admission counts from) is cleared when a version is admitted on the
traffic since then or a held version is released; the retrain task counts the held-out shard before it
trains, and when admission could not pass it records the refusal without training."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from routing import tasks
from routing.models import ProfileDrift, RouterVersion
from routing.router.learning.features import hashing_spec
from routing.router.learning.runtime import forget_routers
from routing.router.versions import profile_drift
from routing.router.versions.drift import is_held
from routing.router.versions.services import router_version_admit, router_version_train
from tests.factories import ApiKeyFactory
from tests.routing.router.test_held_release import _fallback_call, _held_version
from tests.support.ledger import call_row, easy, fill, hard, learned_profile, text_of

pytestmark = pytest.mark.django_db

SPEC = hashing_spec(ngram_dims=256)


@pytest.fixture(autouse=True)
def _fresh_router_cache():
    forget_routers()
    yield
    forget_routers()


def _drifted(calls_after: int):
    profile = learned_profile(target=0.9)
    fill(profile, 150)
    since = timezone.now()
    ProfileDrift.objects.create(profile=profile, flag=True, since=since, reason="router v1 drifted")
    key = ApiKeyFactory.create()
    for i in range(calls_after):  # the new traffic, labelled; the router is right on it
        call_row(profile=profile, key=key, text=text_of(2000 + i), student_ok=(2000 + i) % 3 != 0)
    return profile, since


def test_the_retrain_task_refuses_before_training_when_too_few_new_labelled_calls():
    profile, since = _drifted(6)

    result = tasks.router_retrain(profile.pk)

    version = RouterVersion.objects.get(profile=profile)
    assert result.startswith("not trained: not training a router") and "only " in result, result
    assert version.status == RouterVersion.Status.REJECTED
    assert version.status_reason.startswith("refused before training: only ")
    assert "labelled held-out calls since the drift found at" in version.status_reason
    assert version.model == {} and version.calibration == {} and version.threshold is None  # not trained
    assert version.admission["trained"] is False and version.admission["met"] is False
    assert version.admission["recent"]["calls"] < 20 <= version.admission["calls"]
    assert version.data_until is not None  # the beat retrains again once newer calls arrive
    assert ProfileDrift.objects.get(profile=profile).since == since  # the drift is not over


def test_an_admission_on_the_new_traffic_ends_the_drift_episode():
    profile, _ = _drifted(150)

    result = tasks.router_retrain(profile.pk)

    version = RouterVersion.objects.get(profile=profile)
    assert version.status == RouterVersion.Status.ACTIVE, result
    assert version.admission["recent"]["calls"] >= 20  # judged on the new traffic
    state = ProfileDrift.objects.get(profile=profile)
    assert state.since is None and not state.flag
    assert f"v{version.number} admitted on the new traffic" in state.reason
    # the next admission counts from no shift: its held-out replay has no post-drift part
    nxt = router_version_admit(version=router_version_train(profile=profile, spec=SPEC))
    assert "recent" not in nxt.admission and "since" not in nxt.admission, nxt.admission


def test_an_episode_ends_only_for_its_own_shift():
    profile, since = _drifted(0)
    newer = since + timedelta(minutes=5)
    ProfileDrift.objects.filter(profile=profile).update(since=newer)  # a newer shift found meanwhile
    assert not profile_drift.resolved(profile.pk, since, "v2 admitted")
    assert ProfileDrift.objects.get(profile=profile).since == newer
    assert profile_drift.resolved(profile.pk, newer, "v3 admitted")
    assert ProfileDrift.objects.get(profile=profile).since is None


def test_a_held_version_released_ends_the_drift_episode(settings):
    version, profile, key = _held_version(settings)
    profile_drift.shifted(profile)  # as the drift task did when it found the teacher share's drift
    assert profile_drift.since_of(profile.pk) is not None
    for i in range(100):
        _fallback_call(profile, key, easy(7000 + i), correct=True)
        _fallback_call(profile, key, hard(7000 + i), correct=False)

    assert tasks.router_drift_check(version.pk) is False

    version.refresh_from_db()
    assert not is_held(version.drift_flag, version.drift_reason), version.drift_reason
    state = ProfileDrift.objects.get(profile=profile)
    assert state.since is None and f"v{version.number} released from its hold" in state.reason
