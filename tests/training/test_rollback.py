"""Auto-rollback: an admitted adapter and SkillBook are taken back, together, when the student's sampled
live correctness falls significantly below the admission's figure by the profile's margin; nothing
happens on too few labels, on a small drop, on a superseded admission, or a second time."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from routing.call.sampling import sample_run
from routing.models import Invocation
from tests.factories import AdapterFactory, AdmissionFactory, InvocationFactory, SkillBookFactory
from tests.support.cycle import CITIES, city_of, city_prompt, drive, good, json_profile, responder
from training.deploy import adapter_activate_loaded
from training.models import Adapter, Admission, Rollback, SkillBook
from training.services.cycle import skillbook_activate
from training.services.rollback import (
    RollbackSettingError,
    live_correctness,
    rollback_check,
    rollbacks_check,
)
from training.tasks.cycle import cycles_check_live

pytestmark = pytest.mark.django_db(transaction=True)

OLD_BOOK, NEW_BOOK = "SkillBook v1: copy the city.", "SkillBook v2: copy the city and the country."


def admitted(profile, *, figure=0.9):
    """The profile served v1 (adapter and SkillBook); a joint admission of v2 is applied. Both adapters
    are loaded in the student server already, so neither applying nor rolling back calls it."""
    loaded = timezone.now() - timedelta(hours=1)
    old = AdapterFactory.create(  # the stub tells the student by "student" in the model name
        profile=profile,
        version=1,
        name=f"student-{profile.name}-v1",
        status=Adapter.Status.ACTIVE,
        activated_at=loaded,
        loaded_at=loaded,
    )
    profile.student_adapter = old.name
    old_book = SkillBookFactory.create(profile=profile, version=1, text=OLD_BOOK, activated_at=loaded)
    profile.skillbook_text = OLD_BOOK
    profile.save()
    new = AdapterFactory.create(
        profile=profile, version=2, name=f"student-{profile.name}-v2", loaded_at=timezone.now()
    )
    new_book = SkillBookFactory.create(profile=profile, version=2, text=NEW_BOOK)
    admission = AdmissionFactory.create(
        profile=profile,
        kind=Admission.Kind.JOINT,
        candidate={"adapter": new.pk, "skillbook": new_book.pk},
        active={"skillbook": old_book.pk, "adapter_name": old.name},
        candidate_metrics={"student_pass_rate": figure, "pass_rate": 1.0, "n": 20},
    )
    with transaction.atomic():  # admission_apply's database half (both adapters are loaded already)
        adapter_activate_loaded(adapter_id=new.pk)
        skillbook_activate(skillbook_id=new_book.pk)
    profile.refresh_from_db()
    assert (profile.student_adapter, profile.skillbook_text) == (new.name, NEW_BOOK)
    return admission, old, new


def labelled(profile, *, correct: int, wrong: int, failed: int = 0, rate: float = 1.0):
    """Student-served calls since the admission: sampled ones labelled by the teacher, failed ones."""
    for ok in [True] * correct + [False] * wrong:
        legs = [
            {"role": "student", "verdict": "pass", "correct": ok},
            {"role": "teacher", "verdict": "pass", "background": True, "sample_rate": rate},
        ]
        InvocationFactory.create(profile=profile, legs=legs, sample_state=Invocation.SampleState.DONE)
    for _ in range(failed):
        InvocationFactory.create(
            profile=profile,
            verdict="fail",
            legs=[{"role": "student", "verdict": "fail"}, {"role": "teacher", "verdict": "pass"}],
        )


def test_a_student_wrong_live_is_rolled_back_adapter_and_skillbook_together(
    gateway_url, backends, api_key, stub
):
    """Real traffic: the admitted student answers schema-valid but wrong cities, the background teacher
    samples label them wrong, and the beat's check restores v1 of both parts."""
    profile = json_profile(policy_params={"teacher_sample_rate": 1.0, "rollback_min_samples": 10})
    admission, old, new = admitted(profile)
    wrong = lambda body: json.dumps({"city": "Atlantis", "country": city_of(body)[1]})  # noqa: E731
    stub.responder = responder(student=wrong, teacher=lambda body: good(*city_of(body)))
    calls = drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES])
    assert {c.served_by for c in calls} == {"student"}  # the weak schema check passed every answer
    assert all(sample_run(invocation_id=c.pk) == "done" for c in calls)

    assert cycles_check_live() == [Rollback.objects.get().pk]

    profile.refresh_from_db()
    rollback = Rollback.objects.get()
    assert (profile.student_adapter, profile.skillbook_text) == (old.name, OLD_BOOK)
    assert Adapter.objects.get(pk=old.pk).status == Adapter.Status.ACTIVE
    assert Adapter.objects.get(pk=new.pk).rolled_back_at is not None
    assert (rollback.admission_id, rollback.samples, rollback.live, rollback.figure) == (
        admission.pk,
        len(CITIES),
        0.0,
        0.9,
    )
    assert rollback.restored == {"adapter": old.name, "skillbook": admission.active["skillbook"]}
    assert "below the admission's 0.900 - margin 0.10" in rollback.reason
    assert rollback_check(profile_id=profile.pk) is None  # idempotent: once per admission
    assert Rollback.objects.count() == 1


def test_too_few_labels_or_a_drop_within_the_margin_roll_nothing_back(backends):
    profile = json_profile(policy_params={"rollback_min_samples": 30})
    _, _, new = admitted(profile, figure=0.9)
    labelled(profile, correct=0, wrong=29)
    assert rollback_check(profile_id=profile.pk) is None  # 29 < 30 labels

    labelled(profile, correct=80, wrong=0)  # now 80 / 109 = 0.73: above a 0.9 - 0.2 line
    InvocationFactory.create(profile=profile)  # passed, never sampled: unknown, not counted
    assert live_correctness(profile_id=profile.pk, since=timezone.now() - timedelta(hours=1)).labelled == 109
    profile.policy_params = {"rollback_min_samples": 30, "rollback_margin": 0.2}  # line 0.70
    profile.save()
    assert rollback_check(profile_id=profile.pk) is None
    profile.refresh_from_db()
    assert profile.student_adapter == new.name and not Rollback.objects.exists()


def test_a_drop_that_is_not_significant_rolls_nothing_back(backends):
    profile = json_profile(policy_params={"rollback_min_samples": 10})
    admitted(profile, figure=0.9)
    labelled(profile, correct=7, wrong=3)  # 0.70 < 0.80, but p = 0.32 on 10 labels
    assert rollback_check(profile_id=profile.pk) is None
    labelled(profile, correct=63, wrong=27)  # 0.70 on 100 labels: p < 0.05
    assert rollback_check(profile_id=profile.pk) is not None


def test_live_correctness_weights_sampled_passes_by_their_rate(backends):
    """A quarter of the passes is sampled: each labelled pass stands for four; every failure is known."""
    profile = json_profile()
    labelled(profile, correct=10, wrong=0, failed=10, rate=0.25)

    live = live_correctness(profile_id=profile.pk, since=timezone.now() - timedelta(hours=1))

    assert live.labelled == 20
    assert live.correct == pytest.approx(40 / 50)
    assert live.effective == pytest.approx(50**2 / (10 * 16 + 10))


def test_a_superseded_admission_is_never_undone(backends):
    """The adapter and SkillBook the admission brought in no longer serve (an operator changed them)."""
    profile = json_profile(policy_params={"rollback_min_samples": 10})
    admission, _, new = admitted(profile)
    Adapter.objects.filter(pk=new.pk).update(status=Adapter.Status.RETIRED)
    SkillBook.objects.filter(pk=admission.candidate["skillbook"]).update(activated_at=None)
    labelled(profile, correct=0, wrong=40)

    assert rollback_check(profile_id=profile.pk) is None
    assert not Rollback.objects.exists()


@pytest.mark.parametrize(
    "params",
    [
        {"rollback_margin": "0.1"},
        {"rollback_margin": 2},
        {"rollback_min_samples": 0},
        {"rollback_min_samples": True},
    ],
)
def test_a_bad_rollback_setting_is_named_and_the_beat_goes_on(backends, params):
    bad = json_profile(name="bad", policy_params=params)
    admitted(bad)
    labelled(bad, correct=0, wrong=40)
    good_profile = json_profile(name="good", policy_params={"rollback_min_samples": 10})
    admitted(good_profile)
    labelled(good_profile, correct=0, wrong=40)

    with pytest.raises(RollbackSettingError, match=r"policy_params\.rollback_"):
        rollback_check(profile_id=bad.pk)
    made = rollbacks_check()

    assert [Rollback.objects.get(pk=pk).profile_id for pk in made] == [good_profile.pk]
