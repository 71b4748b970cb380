"""Labels where the router is blind (issue 38): sampling while a version is out, and a label budget.

- While a profile's active version is flagged or held, its safe fixed policy serves; the teacher's calls
  are then re-run on the student at ``LABELS_WANTED_STUDENT_RATE`` (the student is cheap), whatever the
  fallback's own measure says, and the rate the sample records (its label's weight) is the rate drawn.
- A version activated with no labels is sampled as if suspected until ``LABEL_BUDGET`` of its student
  answers are labelled (``drift.LABELS_WANTED``), so its correctness test is never left on a handful.
- The shift benchmark replays both (``bench/router_shift_watch.py``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest
from django.utils import timezone

from bench.router_shift_watch import Watch, watch_stream
from routing.access import lookups
from routing.call import sampling
from routing.models import Invocation, RouterVersion, TaskProfile
from routing.protocol import ChatRequest
from routing.router.learning.evaluate import TrainedRouter
from routing.router.learning.runtime import forget_routers
from routing.router.policies import Call, _active_version, build_router
from routing.router.policy_params import params_problem
from routing.router.versions.drift import HELD, LABELS_WANTED, router_version_drift_check
from routing.router.versions.services import router_version_activate
from routing.router.versions.truth import fixed_choice
from tests.factories import ApiKeyFactory, InvocationFactory, RouterVersionFactory
from tests.routing.router.test_drift import _live_call
from tests.support.ledger import learned_profile

TEACHER = TaskProfile.Policy.ALWAYS_TEACHER


def _decide(profile: TaskProfile):
    lookups.clear()
    request = ChatRequest.model_validate({"model": "auto", "messages": [{"role": "user", "content": "x"}]})
    return build_router(profile).route(Call(request, profile, True))


def _served_by_fallback(profile: TaskProfile, policy: str) -> Invocation:
    return InvocationFactory.create(
        api_key=ApiKeyFactory.create(),
        profile=profile,
        request={"messages": [{"role": "user", "content": "Read the total."}]},
        route="teacher",
        served_by="teacher",
        verdict="pass",
        policy=policy,
        router_version=None,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("flag", "reason"),
    [(True, "correctness 0.700 on 30 labelled calls"), (False, f"{HELD}: teacher share 0.9")],
    ids=["stopped", "held"],
)
def test_while_a_version_is_out_its_fallback_samples_the_student_at_the_wanted_rate(
    settings, monkeypatch, flag, reason
):
    """The fallback is the teacher by configuration, measured on nothing: before, nothing raised its
    sampling (0.05), so the version's re-measurement and a retrain's admission waited on ~5% of calls."""
    forget_routers()
    profile = learned_profile(
        name=f"out-{flag}", fallback=TEACHER, teacher_sample_rate=0.05, student_sample_rate=0.05
    )
    RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.ACTIVE,
        threshold=0.5,
        drift_flag=flag,
        drift_reason=reason,
        activated_at=timezone.now(),
    )
    wanted = settings.SKILLGATE["ROUTER"].get("LABELS_WANTED_STUDENT_RATE", 0.5)
    assert fixed_choice(profile).sample_more
    decision = _decide(profile)
    assert decision.route == "teacher" and decision.version_id is None and decision.sample_boost > 1
    assert sampling.boosted(profile, decision.sample_boost, decision.policy)[1] == wanted

    drawn = []
    for u in (wanted - 0.01, wanted + 0.01):
        monkeypatch.setattr(sampling.random, "random", lambda u=u: u)
        drawn.append(
            sampling.draw(
                profile=profile,
                route=decision.route,
                policy=decision.policy,
                has_student=True,
                boost=decision.sample_boost,
            )
        )
    assert drawn == ["student", ""]  # drawn at the wanted rate
    # ... and the sample records that rate (its label's weight), as ``_sample`` computes it
    inv = _served_by_fallback(profile, decision.policy)
    assert sampling.boosted(profile, sampling.sample_boost(inv), inv.policy)[1] == wanted


@pytest.mark.django_db
def test_a_routing_version_is_not_raised_to_the_wanted_student_rate(settings):
    """The wanted rate is for the teacher serving in a version's place; a version that routes and is
    suspected keeps both legs at DRIFT_SAMPLE_BOOST x their rates."""
    profile = learned_profile(name="routing", teacher_sample_rate=0.05, student_sample_rate=0.05)
    assert sampling.boosted(profile, 4.0, TaskProfile.Policy.LEARNED) == (0.2, 0.2)
    assert sampling.boosted(profile, 1.0, TEACHER) == (0.05, 0.05)
    off = learned_profile(name="off", student_sample_rate=0.0)
    assert sampling.boosted(off, 4.0, TEACHER)[1] == 0.0  # sampling the student off stays off


@pytest.mark.django_db
def test_a_new_version_is_sampled_more_until_its_label_budget_is_met(settings):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 10, "LABEL_BUDGET": 30},
    }
    forget_routers()
    profile = learned_profile(name="budget", teacher_sample_rate=0.05)
    version = RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.CANDIDATE,
        threshold=0.5,
        predicted_teacher_share=0.0,
        predicted_pass_rate=0.95,
    )
    version = router_version_activate(version=version)
    assert version.drift_reason.startswith(LABELS_WANTED) and not version.drift_flag
    assert _active_version(profile.pk).suspected  # sampled x DRIFT_SAMPLE_BOOST from its first call
    key = ApiKeyFactory.create()
    for _ in range(12):  # right as predicted, but 12 labels decide nothing
        _live_call(profile, key, version, correct=True)
    version = router_version_drift_check(version=version)
    assert version.drift_reason.startswith(f"{LABELS_WANTED} (12 of 30"), version.drift_reason
    assert sampling.sample_boost(_live_call(profile, key, version, correct=True)) > 1
    for _ in range(30):
        _live_call(profile, key, version, correct=True)
    version = router_version_drift_check(version=version)
    assert not version.drift_reason.startswith(LABELS_WANTED), version.drift_reason
    lookups.clear()
    assert not _active_version(profile.pk).suspected
    assert sampling.sample_boost(_live_call(profile, key, version, correct=True)) == 1.0


@pytest.mark.django_db
def test_the_label_budget_is_a_setting_per_profile(settings):
    """A profile's ``policy_params`` set its label budget (``label_budget``), how much more it is sampled
    while labels are wanted (``drift_sample_boost``) and the least share of the teacher's calls re-run on
    the student while its fixed policy serves in a version's place (``labels_wanted_student_rate``);
    before, these keys were checked on save and then ignored (the settings' values served). A value out
    of [0, 1] (the rate) or below 0 (the budget) is refused, naming the key."""
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": 10, "LABEL_BUDGET": 30},
    }
    forget_routers()
    own = {"label_budget": 5, "drift_sample_boost": 2.0, "labels_wanted_student_rate": 0.9}
    profile = learned_profile(name="own-budget", teacher_sample_rate=0.05, student_sample_rate=0.05, **own)
    assert params_problem(profile.policy_params) == ""
    version = RouterVersionFactory.create(
        profile=profile,
        number=1,
        status=RouterVersion.Status.CANDIDATE,
        threshold=0.5,
        predicted_teacher_share=0.0,
        predicted_pass_rate=0.95,
    )
    version = router_version_activate(version=version)
    assert version.drift_reason.startswith(f"{LABELS_WANTED} (0 of 5"), version.drift_reason
    key = ApiKeyFactory.create()
    assert sampling.sample_boost(_live_call(profile, key, version, correct=True)) == 2.0
    for _ in range(5):
        _live_call(profile, key, version, correct=True)
    version = router_version_drift_check(version=version)  # 6 labels: the profile's budget of 5 is met
    assert not version.drift_reason.startswith(LABELS_WANTED), version.drift_reason
    assert sampling.boosted(profile, 2.0, TaskProfile.Policy.LEARNED) == (0.1, 0.1)
    assert sampling.boosted(profile, 2.0, TEACHER)[1] == 0.9  # the teacher serves in its place

    RouterVersion.objects.filter(pk=version.pk).update(drift_flag=True, drift_reason="correctness 0.7")
    decision = _decide(profile)  # its fixed policy serves, labels wanted at the profile's boost
    assert decision.version_id is None and decision.sample_boost == 2.0

    assert params_problem({"labels_wanted_student_rate": 1.5}) == (
        "labels_wanted_student_rate must be at most 1; got 1.5"
    )
    assert params_problem({"labels_wanted_student_rate": -0.1}).startswith("labels_wanted_student_rate")
    assert params_problem({"label_budget": -1}) == "label_budget must be at least 0; got -1"
    assert params_problem({"drift_sample_boost": 0.5}).startswith("drift_sample_boost must be at least 1")


PREDICTED = SimpleNamespace(
    student_pass_rate=0.97,
    student_served_share=1.0,
    fallback_rate=0.0,
    margin=None,  # no slack known: the drift test's H1 is the whole pass margin
    cost_usd=0.001,
    teacher_share=0.0,
)
TRAINED = cast(TrainedRouter, SimpleNamespace(calibration=SimpleNamespace(chosen=PREDICTED, n=100_000)))


def test_the_benchmark_replays_the_label_budget_on_a_short_stream():
    """80 calls, the student right 0.85 of the time against a predicted 0.97: at 5% the correctness test
    gets about 4 labels; with the budget (x4 until 30 labels) it gets about 16 and leans or decides."""
    calls = 80
    rng = np.random.default_rng(3)
    ok = rng.random(calls) >= 0.15
    sim = {"ok": ok, "fallback": np.zeros(calls, dtype=bool), "cost": np.full(calls, 0.001)}
    to_teacher = np.zeros(calls, dtype=bool)
    prompts = [100.0] * calls
    counts = {}
    for budget in (0, 30):
        watch = Watch(sample_rate=0.05, check_every=50, label_budget=budget)
        seen = watch_stream(sim, to_teacher, prompts, TRAINED, prompts, watch, seed=7)
        counts[budget] = seen.student_labels
        assert set(seen.rates[:50]) == {0.05 if budget == 0 else 0.2}
    assert counts[30] >= 2 * counts[0] + 5, counts


def test_the_benchmark_samples_the_student_at_the_wanted_rate_while_the_teacher_serves():
    """Every answer of the first 50 wrong: the version stops at the first check, and the teacher's calls
    are then sampled for the student's answer at the wanted rate (0.5), not at the raised 0.3."""
    calls = 200
    ok = np.ones(calls, dtype=bool)
    ok[:50] = False
    sim = {"ok": ok, "fallback": np.zeros(calls, dtype=bool), "cost": np.full(calls, 0.001)}
    prompts = [100.0] * calls
    watch = Watch(sample_rate=0.3, boost=1.0, wanted_student_rate=0.5, label_budget=0)
    seen = watch_stream(sim, np.zeros(calls, dtype=bool), prompts, TRAINED, prompts, watch, seed=1)
    assert seen.stop == 50 and seen.out_at == 50
    assert set(seen.rates[:50]) == {0.3} and set(seen.rates[50:]) == {0.5}


def test_the_benchmark_traces_each_check_and_keeps_sampling_raised_while_suspected():
    """Seed 3's diagnose (harder) in small: the student right about 0.95 of the time against a predicted
    0.97. Each check is traced (labels, right ones, the correctness log-LR and decision, the rate after
    it); past the label budget the rate stays raised (x4) while the test leans towards drift, and drops
    to the base rate at a check where it no longer does."""
    calls = 600
    rng = np.random.default_rng(7)
    ok = rng.random(calls) >= 0.05
    sim = {"ok": ok, "fallback": np.zeros(calls, dtype=bool), "cost": np.full(calls, 0.001)}
    prompts = [100.0] * calls
    watch = Watch(sample_rate=0.05, check_every=50, label_budget=10)
    seen = watch_stream(sim, np.zeros(calls, dtype=bool), prompts, TRAINED, prompts, watch, seed=11)
    assert [c[0] for c in seen.checks] == list(range(50, calls + 1, 50))
    for n, labelled, right, _llr, decision, rate in seen.checks:
        assert right <= labelled
        assert rate == (0.2 if decision == "suspected" or labelled < 10 else 0.05), (n, labelled, decision)
    assert any(c[4] == "suspected" and c[1] >= 10 for c in seen.checks), seen.checks
    assert any(c[4] == "undecided" for c in seen.checks), seen.checks
    assert seen.checks[-1][1] == seen.student_labels and seen.stop is None
