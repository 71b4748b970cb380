"""Drift on cost, and drift of profiles no router version routes: the sequential tests on cost per call
and fallback rate, the stored watch of a profile whose fixed fallback serves (a candidate refused), its
recovery by the safe fallback, and the alerts (the Slack message through the local Slack stub, the
dashboard banner)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from routing import tasks
from routing.models import ApiKey, Invocation, ProfileDrift, RouterVersion, TaskProfile
from routing.protocol import ChatRequest
from routing.router import alerts
from routing.router.learning.runtime import forget_routers
from routing.router.policies import Call, build_router
from routing.router.versions.drift import COST_DRIFT, cost_sprt, fallback_sprt, router_version_drift_check
from routing.router.versions.truth import fixed_choice
from tests.factories import ApiKeyFactory, InvocationFactory, RouterVersionFactory
from tests.support.ledger import learned_profile, leg
from tests.support.slack_stub import SlackStub

CASCADE = TaskProfile.Policy.STUDENT_WITH_FALLBACK
TEACHER = TaskProfile.Policy.ALWAYS_TEACHER


def test_the_cost_test_decides_on_the_mean_cost_per_call() -> None:
    steady = cost_sprt([0.002, 0.0021, 0.0019, 0.002] * 10, 0.002)
    assert steady.decision == "holds"
    dearer = cost_sprt([0.002, 0.011, 0.011, 0.002] * 5, 0.002)  # half the calls fall back: 3.25x
    assert dearer.decision == "drift" and dearer.rate == pytest.approx(0.0065)
    few = cost_sprt([0.0028, 0.0026], 0.002)
    assert few.decision in ("suspected", "undecided")
    assert cost_sprt([], 0.002).decision == "undecided" and cost_sprt([1.0], 0.0).decision == "undecided"


def test_the_fallback_test_is_sequential_too() -> None:
    assert fallback_sprt(72, 100, 0.55).decision == "drift"  # issue 38's code profile: 0.55 -> 0.72
    assert fallback_sprt(50, 100, 0.55).decision == "holds"
    assert fallback_sprt(3, 5, 0.55).decision in ("suspected", "undecided")


def _call(
    profile: TaskProfile,
    key: ApiKey,
    *,
    policy: str = CASCADE,
    correct: bool = True,
    fell_back: bool = False,
    version: RouterVersion | None = None,
    prompt_tokens: int = 200,
) -> Invocation:
    """A call the profile's fixed policy (or ``version``) served, labelled by a background sample."""
    if policy == TEACHER:
        legs = [leg("teacher", "pass"), leg("student", "pass", background=True, correct=correct)]
        route = served = "teacher"
    elif fell_back:
        legs = [leg("student", "fail"), leg("teacher", "pass")]
        route, served = "student", "teacher"
    else:
        legs = [leg("student", "pass", correct=correct), leg("teacher", "pass", background=True)]
        route = served = "student"
    cost = sum(Decimal(item["cost_usd"]) for item in legs if not item.get("background"))
    return InvocationFactory.create(
        api_key=key,
        profile=profile,
        request={"messages": [{"role": "user", "content": "Read the total."}]},
        legs=legs,
        route=route,
        served_by=served,
        verdict="pass",
        policy=(version and "learned") or policy,
        router_version=version,
        fallback=fell_back,
        cost_usd=cost,
        prompt_tokens=prompt_tokens,
    )


def _configure(settings: Any, **router: object) -> None:
    base = {"DRIFT_MIN_CALLS": 10, "MIN_LABELLED_CALLS": 20}
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], **base, **router},
    }
    forget_routers()


@pytest.mark.django_db
def test_a_version_whose_calls_cost_more_than_predicted_is_flagged(settings) -> None:
    """Correct answers, but every other call falls back to the teacher: the fallback rate and the cost
    per call rise past the prediction and the sequential tests say so within 20 calls. The version keeps
    routing (its answers are as correct as predicted; the teacher would cost more still)."""
    _configure(settings)
    profile = learned_profile(name="dearer")
    version = RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.ACTIVE,
        threshold=0.5,
        predicted_teacher_share=0.0,
        predicted_pass_rate=0.95,
        calibration={"chosen": {"cost_usd": 0.0015, "fallback_rate": 0.05}},
        activated_at=timezone.now(),
    )
    key = ApiKeyFactory.create()
    for i in range(20):
        _call(profile, key, version=version, fell_back=i % 2 == 0)
    version = router_version_drift_check(version=version)
    assert version.drift_reason.startswith(COST_DRIFT), version.drift_reason
    assert (
        "cost per call $0.006 vs $0.0015" in version.drift_reason
        and "fallback rate 0.500" in version.drift_reason
    )
    assert not version.drift_flag  # correct answers: it keeps routing, and is alerted and retrained
    assert [(a.subject, a.stops) for a in alerts.flagged()] == [("router v1 of dearer", False)]


def _route(profile: TaskProfile) -> Any:
    request = ChatRequest.model_validate({"model": "auto", "messages": [{"role": "user", "content": "x"}]})
    return build_router(profile).route(Call(request, profile, True))


@pytest.mark.django_db(transaction=True)
def test_a_profile_with_no_version_is_watched_flagged_alerted_and_recovers(
    settings, slack: SlackStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused candidate leaves the cascade serving. Its baseline is measured (1.00 correct on 30
    labelled calls); then the weak verifier passes shifted answers that are right 0.6 of the time. The
    watch flags it within 20 calls, posts one Slack message to the alert channel, queues a retrain, and
    the teacher serves (its reason says the fallback is measured again). Labelled calls after the drift
    measure the fallback again: the flag clears, and the profile is served at its target."""
    _configure(settings)
    settings.SLACK_BOT_TOKEN, settings.SLACK_API_URL = "xoxb-test", slack.base_url
    settings.SLACK_ALERT_CHANNEL = "C0ALERTS"
    retrains: list[int] = []
    monkeypatch.setattr(tasks.router_retrain, "delay", retrains.append)
    profile = learned_profile(name="refused", target=0.9)
    RouterVersionFactory.create(profile=profile, number=1, status=RouterVersion.Status.REJECTED)
    key = ApiKeyFactory.create()
    for _ in range(30):
        _call(profile, key)
    assert fixed_choice(profile).policy == CASCADE, fixed_choice(profile).reason

    assert not tasks.router_profile_drift_check(profile.pk)
    state = ProfileDrift.objects.get(profile=profile)
    assert state.baseline["policy"] == CASCADE and state.baseline["pass_rate"] == 1.0, state.reason
    # the cascade's bound margin over the target: its correctness test's H1 names no larger fall
    assert state.baseline["slack"] == pytest.approx(fixed_choice(profile).margin)

    flagged_at = None
    for calls in range(10, 60, 10):
        for i in range(10):
            _call(profile, key, correct=i % 5 < 3)  # 0.6 right, every answer passes the verifier
        if tasks.router_profile_drift_check(profile.pk):
            flagged_at = calls
            break
    state.refresh_from_db()
    assert flagged_at is not None and flagged_at <= 20, state.reason
    assert "correctness" in state.reason and state.since is not None
    assert retrains == [profile.pk]
    [posted] = slack.of("chat.postMessage")
    assert posted["channel"] == "C0ALERTS" and "fixed fallback of refused is drifting" in posted["text"]
    assert [a.subject for a in alerts.flagged()] == ["the fixed fallback of refused"]

    decision = _route(profile)
    assert decision.route == "teacher" and decision.sample_boost > 1
    assert "labelled calls; the teacher serves" in decision.reason
    assert tasks.router_profile_drift_check(profile.pk)  # still flagged: nothing measured since the drift
    assert len(slack.of("chat.postMessage")) == 1  # alerted once per drift

    for _ in range(20):  # the teacher serves; student samples label what the student does now
        _call(profile, key, policy=TEACHER, correct=False)
    assert not tasks.router_profile_drift_check(profile.pk)
    state.refresh_from_db()
    assert not state.flag and "recovered" in state.reason
    assert state.baseline["policy"] == TEACHER and state.baseline["pass_rate"] == 1.0
    assert "slack" not in state.baseline  # the teacher is the reference: no slack of its own
    assert fixed_choice(profile).policy == TEACHER  # the cascade misses the target on the new traffic
    assert alerts.flagged() == []


@pytest.mark.django_db
def test_a_version_that_drifts_restarts_the_fallbacks_measure(settings, monkeypatch) -> None:
    _configure(settings)
    monkeypatch.setattr(tasks.router_retrain, "delay", lambda pk: None)
    profile = learned_profile(name="shifted", target=0.9)
    key = ApiKeyFactory.create()
    for _ in range(30):
        _call(profile, key)  # before the version: the cascade measured good
    version = RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.ACTIVE,
        threshold=0.5,
        predicted_teacher_share=0.0,
        predicted_pass_rate=0.95,
        activated_at=timezone.now(),
    )
    for i in range(30):
        _call(profile, key, version=version, correct=i % 3 != 2)
    assert tasks.router_drift_check(version.pk)
    state = ProfileDrift.objects.get(profile=profile)
    assert state.flag and state.since is not None
    choice = fixed_choice(profile)
    assert choice.policy == TEACHER and choice.unmeasured  # the old calls no longer vouch for the cascade
    assert [a.subject for a in alerts.flagged()] == ["router v1 of shifted"]
