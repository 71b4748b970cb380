"""Drift on truth: the sequential test, the input-shift score, and a shifted mix flagged within a stated
number of calls, after which the profile is served by its safe fixed policy."""

from __future__ import annotations

import random

import pytest
from django.utils import timezone

from routing.call.sampling import boosted, sample_boost
from routing.models import ApiKey, Invocation, RouterVersion, TaskProfile
from routing.protocol import ChatRequest
from routing.router.learning.runtime import forget_routers
from routing.router.learning.sequential import psi, psi_test, sprt, student_sprt
from routing.router.policies import Call, _active_version, build_router
from routing.router.versions.drift import (
    EARLIER,
    HELD,
    ROUTING,
    Judgement,
    Live,
    Predicted,
    is_cost_drift,
    is_held,
    judge_live,
    latched,
    router_version_drift_check,
)
from tests.factories import ApiKeyFactory, InvocationFactory, RouterVersionFactory
from tests.support.ledger import learned_profile, leg


def test_sprt_decides_drift_holds_or_waits():
    fell = sprt([True] * 14 + [False] * 6, [1.0] * 20, 0.95, 0.90)  # 0.70 on 20 calls
    assert fell.decision == "drift" and fell.llr >= fell.upper
    held = sprt([True] * 120, [1.0] * 120, 0.95, 0.90)
    assert held.decision == "holds"
    few = sprt([True, False], [1.0, 1.0], 0.95, 0.90)
    assert few.decision in ("suspected", "undecided") and few.n_eff == 2
    assert sprt([], [], 0.95, 0.9).decision == "undecided"


def test_sprt_weights_count_at_their_effective_size():
    """20 samples at rate 0.05 stand for 400 calls, but the evidence is still 20 outcomes' worth."""
    outcomes = [True] * 17 + [False] * 3
    weighted = sprt(outcomes, [20.0] * 20, 0.95, 0.90)
    plain = sprt(outcomes, [1.0] * 20, 0.95, 0.90)
    assert weighted.n_eff == pytest.approx(20) and weighted.llr == pytest.approx(plain.llr)


def test_psi_sees_a_shift_in_prompt_sizes():
    rng = random.Random(3)
    before = [rng.lognormvariate(5, 0.3) for _ in range(500)]
    same = [rng.lognormvariate(5, 0.3) for _ in range(300)]
    longer = [rng.lognormvariate(7, 0.3) for _ in range(300)]
    assert psi(before, same) < 0.1
    assert psi(before, longer) > 0.25


def test_the_student_test_weighs_each_sampled_answer_once_against_a_cautious_prediction():
    """The student's own answers predicted right 0.997 of the time on 340: one failure in three labelled
    ones is no proof of drift (the weighted test over every call flagged the shifted code profile at
    call 250 on exactly that: one 1/0.05-weighted sample among the teacher's answers), while 0.70 on 20
    is."""
    one_in_three = student_sprt([True, False, True], 0.997, 0.5, 0.05, calls=340)
    assert one_in_three.decision != "drift" and one_in_three.n_eff == 3
    fell = student_sprt([True, True, False] * 7, 0.997, 0.5, 0.05, calls=340)
    assert fell.decision == "drift"
    held = student_sprt([True] * 60, 0.95, 0.5, 0.05, calls=340)
    assert held.decision == "holds"
    # a small share of calls served by the student: a served fall of 0.05 is a larger fall among them
    assert student_sprt([True] * 8 + [False] * 2, 0.95, 0.2, 0.05).decision != "drift"


def test_psi_allows_for_what_sampling_alone_gives():
    rng = random.Random(5)
    before = [rng.lognormvariate(6, 1.2) for _ in range(500)]
    same = [rng.lognormvariate(6, 1.2) for _ in range(50)]
    longer = [rng.lognormvariate(8, 1.2) for _ in range(50)]
    value, drift_at = psi_test(before, same)
    assert value < drift_at and drift_at > 0.25
    moved, moved_at = psi_test(before, longer)
    assert moved >= moved_at


def _live_call(profile: TaskProfile, key: ApiKey, version: RouterVersion, *, correct: bool) -> Invocation:
    """A call the version sent to the student; its answer passed the (weak) verifier, and a background
    teacher sample's comparison labelled it."""
    return InvocationFactory.create(
        api_key=key,
        profile=profile,
        request={"messages": [{"role": "user", "content": "Read the total."}]},
        legs=[leg("student", "pass", correct=correct), leg("teacher", "pass", background=True)],
        route="student",
        served_by="student",
        verdict="pass",
        router_version=version,
        prompt_tokens=200,
    )


@pytest.mark.django_db
def test_a_shifted_mix_is_flagged_within_30_calls_and_the_profile_falls_back_to_the_teacher(settings):
    """Predicted 0.95 correct; the shifted traffic is right 0.70 of the time, while the weak verifier
    passes every answer (a pass-rate check on verdicts reads 1.00). Checked every 10 calls, the SPRT
    flags it within 30 calls; from then on the version does not route: the profile's safe fixed policy
    does (the cascade's measured quality misses the target, so the teacher), and says so."""
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 10, "MIN_LABELLED_CALLS": 20},
    }
    forget_routers()
    profile = learned_profile(name="shifted")
    version = RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.ACTIVE,
        threshold=0.5,
        predicted_teacher_share=0.0,
        predicted_pass_rate=0.95,
        activated_at=timezone.now(),
    )
    key = ApiKeyFactory.create()
    flagged_at = None
    for calls in range(10, 210, 10):
        for i in range(10):  # 7 in 10 right, spread: [T, T, F, T, T, F, T, T, F, T]
            _live_call(profile, key, version, correct=i % 3 != 2)
        version = router_version_drift_check(version=version)
        if version.drift_flag:
            flagged_at = calls
            break
    assert flagged_at is not None and flagged_at <= 30, version.drift_reason
    assert "correctness" in version.drift_reason and "SPRT" in version.drift_reason
    assert Invocation.objects.filter(router_version=version, verdict="pass").count() == flagged_at

    request = ChatRequest.model_validate({"model": "auto", "messages": [{"role": "user", "content": "x"}]})
    decision = build_router(profile).route(Call(request, profile, True))
    assert decision.route == "teacher" and decision.version_id is None
    assert "drifting" in decision.reason and "misses the target" in decision.reason


@pytest.mark.django_db
def test_while_drift_is_suspected_the_version_samples_more(settings):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 10},
    }
    forget_routers()
    profile = learned_profile(name="leaning", teacher_sample_rate=0.05)
    version = RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.ACTIVE,
        threshold=0.5,
        predicted_teacher_share=0.0,
        predicted_pass_rate=0.95,
        activated_at=timezone.now(),
    )
    key = ApiKeyFactory.create()
    for i in range(10):  # 0.8 right: the test leans towards drift but has not decided
        _live_call(profile, key, version, correct=i % 5 != 0)

    version = router_version_drift_check(version=version)

    assert not version.drift_flag and version.drift_reason.startswith("drift suspected")
    active = _active_version(profile.pk)
    assert active.suspected and active.pk == version.pk
    assert boosted(profile, settings.SKILLGATE["ROUTER"].get("DRIFT_SAMPLE_BOOST", 4.0)) == (0.2, 0.05 * 4)
    assert sample_boost(_live_call(profile, key, version, correct=True)) == 4.0


@pytest.mark.django_db
def test_the_teachers_own_misses_are_not_the_routers_drift(settings):
    """A version calibrated with its student answering 60% of calls right 0.95 of the time: live, the
    teacher's answers fail their verification now and then (a harder mix for it too), and every sampled
    student answer is right. Correctness holds: it tests the student's own answers only. Then the
    student's answers fall to 0.70 and the check, after those 40 right ones, flags it within 40 of them."""
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 10},
    }
    forget_routers()
    profile = learned_profile(name="teacher-misses")
    chosen = {"student_served_share": 0.6, "student_pass_rate": 0.95, "pass_rate": 0.96}
    version = RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.ACTIVE,
        threshold=0.5,
        predicted_teacher_share=0.4,
        predicted_pass_rate=0.96,
        calibration={"chosen": chosen, "n": 500},
        activated_at=timezone.now(),
    )
    key = ApiKeyFactory.create()
    for i in range(40):
        InvocationFactory.create(
            api_key=key,
            profile=profile,
            request={"messages": [{"role": "user", "content": "Read the total."}]},
            legs=[leg("teacher", "fail" if i % 4 == 0 else "pass")],
            route="teacher",
            served_by="teacher",
            router_version=version,
            prompt_tokens=200,
        )
        _live_call(profile, key, version, correct=True)
    version = router_version_drift_check(version=version)
    assert not version.drift_flag and "the student's own answers" in version.drift_reason
    flagged_at = None
    for calls in range(10, 110, 10):
        for i in range(10):
            _live_call(profile, key, version, correct=i % 3 != 2)
        version = router_version_drift_check(version=version)
        if version.drift_flag:
            flagged_at = calls
            break
    assert flagged_at is not None and flagged_at <= 40, version.drift_reason
    assert version.drift_reason.startswith("correctness")


def _teacher_call(profile: TaskProfile, key: ApiKey, version: RouterVersion) -> Invocation:
    """A call the version sent to the teacher up front; the teacher's answer passed."""
    return InvocationFactory.create(
        api_key=key,
        profile=profile,
        request={"messages": [{"role": "user", "content": "Read the total."}]},
        legs=[leg("teacher", "pass")],
        route="teacher",
        served_by="teacher",
        router_version=version,
        prompt_tokens=200,
    )


@pytest.mark.django_db
def test_suspected_correctness_with_another_drift_serves_the_safe_policy_until_it_holds(settings):
    """Calibrated to send no call to the teacher and to answer 0.95 of the student's calls right: live,
    two calls in three go to the teacher (drift of teacher share) and the student's labelled answers
    are right 0.8 of the time (10 of them: the correctness test leans towards drift, undecided). Not
    left to chance: the version is held, the profile's safe fixed policy serves and says why. Once 100
    more right answers make the test accept H0, the version routes again (drift of teacher share alone)."""
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 10},
    }
    forget_routers()
    profile = learned_profile(name="held")
    chosen = {"student_served_share": 1.0, "student_pass_rate": 0.95, "pass_rate": 0.95}
    version = RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.ACTIVE,
        threshold=0.5,
        predicted_teacher_share=0.0,
        predicted_pass_rate=0.95,
        calibration={"chosen": chosen},
        activated_at=timezone.now(),
    )
    key = ApiKeyFactory.create()
    for i in range(10):
        _live_call(profile, key, version, correct=i % 5 != 0)
        _teacher_call(profile, key, version)
        _teacher_call(profile, key, version)

    version = router_version_drift_check(version=version)

    assert not version.drift_flag and version.drift_reason.startswith(HELD), version.drift_reason
    assert is_held(False, version.drift_reason) and is_cost_drift(False, version.drift_reason)
    assert "teacher share" in version.drift_reason and "suspected" in version.drift_reason
    request = ChatRequest.model_validate({"model": "auto", "messages": [{"role": "user", "content": "x"}]})
    decision = build_router(profile).route(Call(request, profile, True))
    assert decision.version_id is None and decision.route == "teacher"
    assert "drifting" in decision.reason and "correctness suspected" in decision.reason
    assert decision.sample_boost > 1.0

    for _ in range(100):
        _live_call(profile, key, version, correct=True)
    version = router_version_drift_check(version=version)
    assert version.drift_reason.startswith(ROUTING), version.drift_reason
    assert not is_held(version.drift_flag, version.drift_reason)
    active = _active_version(profile.pk)  # the version routes again (still sampled more: cost drift)
    assert active.pk == version.pk and not active.drift and active.suspected


def test_the_hold_needs_both_a_leaning_correctness_test_and_another_drift():
    """``judge_live`` on numbers alone: fallbacks far above the prediction with the student's answers
    right 0.8 of the time (suspected) hold the version; with them right every time it keeps routing;
    with no other drift, suspected correctness only raises sampling; 0.5 right decides drift (stop)."""
    predicted = Predicted(fallback_rate=0.05, student_share=1.0, student_pass_rate=0.95)

    def judged(labels: list[bool], fallbacks: int) -> Judgement:
        live = Live(calls=100, fallbacks=fallbacks, student_labels=labels, student_served=100)
        return judge_live(live, predicted)

    held = judged([True, True, True, True, False] * 2, 40)
    assert held.hold and not held.stop and held.reason.startswith(HELD) and "fallback rate" in held.reason
    routing = judged([True] * 80, 40)
    assert not routing.hold and not routing.stop and routing.reason.startswith(ROUTING)
    leaning = judged([True, True, True, True, False] * 2, 5)
    assert not leaning.flag and not leaning.hold and leaning.suspected
    stopped = judged([True, False] * 10, 40)
    assert stopped.stop and not stopped.hold


def test_another_drift_stands_until_a_retrain_and_a_hold_until_the_test_accepts_h0():
    """The fallbacks drifted at an earlier check and are back to normal now: that drift still stands
    (its retrain is queued), so correctness leaning towards drift later holds the version; once held,
    an undecided test keeps it held, and only accepting H0 lets the version route again."""
    predicted = Predicted(fallback_rate=0.05, student_share=1.0, student_pass_rate=0.95)
    earlier = judge_live(
        Live(calls=100, fallbacks=40, student_labels=[True] * 3, student_served=100), predicted
    )
    assert earlier.reason.startswith(ROUTING)
    standing = latched(earlier.reason)
    assert standing.startswith("fallback rate") and latched(f"{ROUTING}: {standing}{EARLIER}") == standing

    def judged(labels: list[bool], held: bool = False) -> Judgement:
        live = Live(calls=200, fallbacks=10, student_labels=labels, student_served=200)
        return judge_live(live, predicted, standing, held)

    held = judged([True, True, True, True, False] * 2)
    assert held.hold and held.reason.startswith(HELD) and standing in held.reason
    assert judged([True] * 3).reason.startswith(ROUTING)  # undecided, not held before: routes
    assert judged([True] * 3, held=True).hold  # undecided, held before: still held
    assert not judged([True] * 80, held=True).hold  # accepted H0: routes again
