"""Router versions from ledger rows: admission, rejection, rollback, the learned policy's
fallback, drift, and the retrain task."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from routing.models import RouterVersion, TaskProfile
from routing.protocol import ChatRequest
from routing.router.learning.calibration import Target, shard_of
from routing.router.learning.features import hashing_spec
from routing.router.learning.records import task_id_of
from routing.router.learning.runtime import forget_routers
from routing.router.policies import Call, build_router
from routing.router.versions.drift import COST_DRIFT, router_version_drift_check
from routing.router.versions.services import (
    RouterTrainingError,
    RouterVersionError,
    router_version_admit,
    router_version_rollback,
    router_version_train,
)
from routing.tasks import router_drift_check, router_retrain
from tests.factories import ApiKeyFactory, RouterVersionFactory
from tests.support.ledger import call_row, easy, fill, hard, learned_profile, text_of

pytestmark = pytest.mark.django_db

SPEC = hashing_spec(ngram_dims=256)


def route_of(profile: TaskProfile, text: str, verified: bool = True) -> tuple[str, int | None, str]:
    request = ChatRequest.model_validate({"model": "auto", "messages": [{"role": "user", "content": text}]})
    decision = build_router(profile).route(Call(request, profile, verified))
    return decision.route, decision.version_id, decision.policy


@pytest.fixture(autouse=True)
def _fresh_router_cache():
    forget_routers()
    yield
    forget_routers()


def test_admitted_version_routes_the_calls_that_need_the_teacher():
    profile = learned_profile()
    fill(profile)
    assert route_of(profile, hard(999)) == ("student", None, "student_with_fallback")

    version = router_version_admit(version=router_version_train(profile=profile, spec=SPEC))

    assert version.status == RouterVersion.Status.ACTIVE, version.status_reason
    assert version.training_records and version.calibration_records and version.heldout_records
    assert version.calibration["chosen"]["threshold"] == version.threshold
    assert version.admission["met"] and version.admission["calls"] == version.heldout_records
    assert version.predicted_teacher_share == pytest.approx(1 / 3, abs=0.15)
    assert route_of(profile, hard(999)) == ("teacher", version.pk, "learned")
    assert route_of(profile, easy(998)) == ("student", version.pk, "learned")


def test_a_target_no_threshold_meets_is_rejected_with_the_reason():
    profile = learned_profile()
    key = ApiKeyFactory.create()
    for i in range(150):  # the teacher too fails half the hard calls: at best ~83% pass
        call_row(profile=profile, key=key, text=text_of(i), student_ok=i % 3 != 0, teacher_ok=i % 6 != 0)
    version = router_version_train(profile=profile, spec=SPEC, target=Target(0.95, relative=False))
    version = router_version_admit(version=version)
    assert version.status == RouterVersion.Status.REJECTED
    assert "calibration" in version.status_reason and "no threshold meets" in version.status_reason
    assert not RouterVersion.objects.filter(status=RouterVersion.Status.ACTIVE).exists()
    assert route_of(profile, hard(999))[2] == "student_with_fallback"


def test_a_version_that_fails_on_the_held_out_shard_is_rejected():
    """No verifier: the student's wrong answers stand. On the held-out shard the student is wrong
    on the easy calls too (calibration never saw that), so the policy misses the target there."""
    profile = learned_profile(name="novf", verifier={})
    key = ApiKeyFactory.create()
    for i in range(200):
        text = text_of(i)
        held_out = shard_of(task_id_of({"messages": [{"role": "user", "content": text}]})) == 4
        ok = i % 3 != 0 and not held_out
        call_row(profile=profile, key=key, text=text, student_ok=ok, verified=False)

    version = router_version_train(profile=profile, spec=SPEC)
    assert version.calibration["met"]
    version = router_version_admit(version=version)

    assert version.status == RouterVersion.Status.REJECTED
    assert "held-out pass rate" in version.status_reason
    assert version.admission["pass_rate"] < version.admission["required_pass_rate"]


def test_too_few_held_out_calls_are_not_enough_to_admit(settings):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "MIN_HELDOUT_CALLS": 1000},
    }
    profile = learned_profile()
    fill(profile)
    version = router_version_admit(version=router_version_train(profile=profile, spec=SPEC))
    assert version.status == RouterVersion.Status.REJECTED
    assert "labelled held-out calls" in version.status_reason


def test_rollback_reactivates_an_earlier_version_and_keeps_one_active():
    profile = learned_profile()
    fill(profile)
    first = router_version_admit(version=router_version_train(profile=profile, spec=SPEC))
    second = router_version_admit(version=router_version_train(profile=profile, spec=SPEC))
    first.refresh_from_db()
    assert (first.status, second.status) == ("retired", "active")
    assert route_of(profile, hard(999))[1] == second.pk

    router_version_rollback(profile=profile, to_version=first)

    statuses = dict(RouterVersion.objects.values_list("number", "status"))
    assert statuses == {first.number: "active", second.number: "retired"}
    assert route_of(profile, hard(999))[1] == first.pk
    with pytest.raises(IntegrityError), transaction.atomic():
        RouterVersion.objects.filter(pk=second.pk).update(status=RouterVersion.Status.ACTIVE)


def test_rollback_refuses_versions_never_admitted_and_other_profiles():
    profile = learned_profile()
    other = learned_profile(name="other")
    fill(profile, 60)
    rejected = router_version_train(profile=profile, spec=SPEC)
    with pytest.raises(RouterVersionError, match="candidate"):  # not admitted yet
        router_version_rollback(profile=profile, to_version=rejected)
    RouterVersion.objects.filter(pk=rejected.pk).update(status=RouterVersion.Status.REJECTED)
    rejected.refresh_from_db()
    with pytest.raises(RouterVersionError, match="retired"):
        router_version_rollback(profile=profile, to_version=rejected)
    with pytest.raises(RouterVersionError, match="another profile"):
        router_version_rollback(profile=other, to_version=rejected)


def test_a_model_this_machine_cannot_featurize_falls_back_to_the_fixed_policy():
    profile = learned_profile(fallback="always_teacher")
    fill(profile)
    version = router_version_admit(version=router_version_train(profile=profile, spec=SPEC))
    assert version.status == RouterVersion.Status.ACTIVE
    model = {**version.model, "feature_spec": {**version.model["feature_spec"], "embedder": "minilm"}}
    model["feature_spec"]["embedder_id"] = "a-model-not-installed-here"
    RouterVersion.objects.filter(pk=version.pk).update(model=model)
    forget_routers()

    route, version_id, policy = route_of(profile, easy(998))

    assert (route, version_id, policy) == ("teacher", None, "always_teacher")


def test_only_one_retrain_of_a_profile_runs_at_a_time():
    profile = learned_profile()
    RouterVersionFactory.create(profile=profile, number=1)  # status training
    with pytest.raises(RouterTrainingError, match="already training"):
        router_version_train(profile=profile, spec=SPEC)


def test_retrain_task_trains_calibrates_and_admits(settings):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "FEATURES": "hashing"},
    }
    profile = learned_profile()
    fill(profile)
    assert router_retrain(profile.pk).startswith("v1 active")
    assert router_retrain(profile.pk).startswith("v2 active")
    assert RouterVersion.objects.get(number=1).status == RouterVersion.Status.RETIRED


def test_retrain_without_labelled_calls_records_a_failed_version():
    profile = learned_profile()
    assert router_retrain(profile.pk).startswith("not trained")
    failed = RouterVersion.objects.get(profile=profile)
    assert failed.status == RouterVersion.Status.FAILED and "cannot train" in failed.status_reason


def _active(profile: TaskProfile, share: float, pass_rate: float) -> RouterVersion:
    return RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.ACTIVE,
        threshold=0.5,
        predicted_teacher_share=share,
        predicted_pass_rate=pass_rate,
        activated_at=timezone.now(),
    )


def test_drift_is_flagged_when_the_live_teacher_share_parts_from_the_prediction(settings, monkeypatch):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 20, "DRIFT_SHARE_MARGIN": 0.1},
    }
    profile = learned_profile()
    version = _active(profile, share=0.3, pass_rate=0.95)
    key = ApiKeyFactory.create()
    for i in range(30):  # live: 2/3 to the teacher, predicted 0.3
        call_row(
            profile=profile,
            key=key,
            text=easy(i),
            student_ok=True,
            version=version,
            route="teacher" if i % 3 else "student",
        )

    enqueued: list[int] = []  # the broker's side: a retrain is enqueued for the newly flagged version
    monkeypatch.setattr(router_retrain, "delay", enqueued.append)
    # the answers are as correct as predicted: it keeps routing (the teacher would cost more still), and
    # is retrained on the new traffic
    assert router_drift_check(version.pk) is False
    assert enqueued == [profile.pk]
    version.refresh_from_db()
    assert version.live_calls == 30
    assert version.live_teacher_share == pytest.approx(2 / 3)
    assert version.live_pass_rate == 1.0
    assert version.drift_reason.startswith(COST_DRIFT) and "teacher share" in version.drift_reason
    assert router_drift_check(version.pk) is False and enqueued == [profile.pk]  # once per drift


def test_drift_is_flagged_when_the_live_pass_rate_falls_and_cleared_when_it_holds(settings):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 20, "DRIFT_PASS_MARGIN": 0.05},
    }
    profile = learned_profile(name="novf", verifier={})
    version = _active(profile, share=0.0, pass_rate=0.95)
    key = ApiKeyFactory.create()
    rows = [
        call_row(
            profile=profile, key=key, text=easy(i), student_ok=i % 4 != 0, verified=False, version=version
        )
        for i in range(40)
    ]
    version = router_version_drift_check(version=version)
    assert version.drift_flag and version.live_pass_rate == pytest.approx(0.75)
    assert "correctness" in version.drift_reason

    for row in rows:  # the wrong answers turn out right after all
        row.legs[0]["correct"] = True
        row.save(update_fields=["legs"])
    version = router_version_drift_check(version=version)
    assert not version.drift_flag and version.live_pass_rate == 1.0


def test_drift_is_not_judged_on_too_few_calls(settings):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 50},
    }
    profile = learned_profile()
    version = _active(profile, share=0.0, pass_rate=0.95)
    call_row(
        profile=profile,
        key=ApiKeyFactory.create(),
        text=easy(1),
        student_ok=True,
        version=version,
        route="teacher",
    )
    version = router_version_drift_check(version=version)
    assert not version.drift_flag and version.live_calls == 1 and "judged from 50" in version.drift_reason
