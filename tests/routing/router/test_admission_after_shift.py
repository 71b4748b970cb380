"""Admission after drift: the held-out calls from before the shift do not vouch for a candidate on the
new traffic. The case ``bench/router_shift.py --retrain`` found (diagnose, shifted and harder): a retrain
admitted on a held-out pass of 1.000 with 6 new labelled calls, which then served below the target."""

from __future__ import annotations

import numpy as np
import pytest
from django.utils import timezone

from routing.models import ProfileDrift, RouterVersion
from routing.router.learning.calibration import Target
from routing.router.learning.features import hashing_spec
from routing.router.learning.records import Outcome, ReplayRecord
from routing.router.learning.runtime import forget_routers
from routing.router.versions.admission import recent_numbers, refusal
from routing.router.versions.data import MAX_RECENCY_WEIGHT, shift_weighted
from routing.router.versions.services import router_version_admit, router_version_train
from tests.factories import ApiKeyFactory
from tests.support.ledger import call_row, easy, fill, learned_profile, text_of

pytestmark = pytest.mark.django_db

SPEC = hashing_spec(ngram_dims=256)


@pytest.fixture(autouse=True)
def _fresh_router_cache():
    forget_routers()
    yield
    forget_routers()


def record(i: int, student_ok: bool, teacher_ok: bool = True) -> ReplayRecord:
    return ReplayRecord(
        id=str(i),
        task_id=str(i),
        profile="p",
        request={"messages": [{"role": "user", "content": easy(i)}]},
        has_verifier=True,
        turn_index=0,
        skillbook_matched=False,
        student=Outcome("pass", student_ok, 0.001, 100.0),
        teacher=Outcome("pass", teacher_ok, 0.01, 400.0),
    )


def test_a_handful_of_right_answers_is_no_promise_and_the_bound_decides():
    target = Target(0.98, True, None, 1.0)
    few = [record(i, True) for i in range(6)]
    recent = recent_numbers(few, np.zeros(6, dtype=bool), target)
    assert recent.pass_rate == 1.0 and recent.pass_rate >= (recent.required or 1.0)  # the point estimate
    assert recent.margin is not None and recent.margin < 0  # its bound: 6 calls cannot show 0.98
    assert "only 6 labelled held-out calls since the drift" in refusal(recent, 20, "then")

    many = [record(i, True) for i in range(200)]
    assert refusal(recent_numbers(many, np.zeros(200, dtype=bool), target), 20, "then") == ""
    # the same calls with one wrong answer in ten: the bound misses the target, and says by how much
    worse = [record(i, i % 10 != 0) for i in range(200)]
    why = refusal(recent_numbers(worse, np.zeros(200, dtype=bool), target), 20, "then")
    assert "held-out pass rate 0.900 on 200 labelled calls since the drift" in why
    # routed to the teacher, those calls are served at the teacher's rate: the target holds
    assert refusal(recent_numbers(worse, np.ones(200, dtype=bool), target), 20, "then") == ""


def test_after_drift_a_candidate_needs_labelled_held_out_calls_of_the_new_traffic():
    profile = learned_profile(target=0.9)
    fill(profile, 150)
    ProfileDrift.objects.create(profile=profile, flag=True, since=timezone.now(), reason="router v1 drifted")
    key = ApiKeyFactory.create()
    for i in range(6):  # the new traffic so far: 6 labelled calls, all right
        call_row(profile=profile, key=key, text=easy(1000 + i), student_ok=True)

    version = router_version_admit(version=router_version_train(profile=profile, spec=SPEC))

    assert version.status == RouterVersion.Status.REJECTED, version.admission
    # the rule before this one (every labelled held-out call, a point estimate) would have admitted it
    assert version.admission["calls"] >= 20
    assert version.admission["pass_rate"] >= version.admission["required_pass_rate"]
    assert version.admission["recent"]["calls"] < 20
    assert "labelled held-out calls since the drift found at" in version.status_reason
    assert not RouterVersion.objects.filter(profile=profile, status=RouterVersion.Status.ACTIVE).exists()

    for i in range(150):  # the raised sampling labels more of the new traffic, where the router is right
        call_row(profile=profile, key=key, text=text_of(2000 + i), student_ok=(2000 + i) % 3 != 0)
    version = router_version_admit(version=router_version_train(profile=profile, spec=SPEC))

    assert version.status == RouterVersion.Status.ACTIVE, version.status_reason
    recent = version.admission["recent"]
    assert recent["calls"] >= 20 and recent["margin"] >= 0


def test_after_a_shift_the_new_labelled_calls_train_at_about_the_old_weight():
    old = [record(i, True) for i in range(100)]
    new = [record(1000 + i, False) for i in range(10)]
    weighted = shift_weighted([*old, *new], lambda r: int(r.id) >= 1000)
    assert len(weighted) == 100 + 10 * 10 and sum(r.id == "1000" for r in weighted) == 10
    assert len(shift_weighted([*old[:20], *new], lambda r: int(r.id) >= 1000)) == 20 + 10 * 2
    capped = shift_weighted([*old, new[0]], lambda r: int(r.id) >= 1000)
    assert sum(r.id == "1000" for r in capped) == MAX_RECENCY_WEIGHT
    assert shift_weighted(old, lambda r: False) == old
