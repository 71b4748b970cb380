"""Truth on the ledger: a verifier's measured precision, the fixed fallback chosen by measured quality,
and no version trained or admitted on unknown labels."""

from __future__ import annotations

import pytest

from routing.models import ApiKey, Invocation, RouterVersion, TaskProfile
from routing.protocol import ChatRequest
from routing.router.learning.calibration import shard_of
from routing.router.learning.features import hashing_spec
from routing.router.learning.records import task_id_of
from routing.router.learning.runtime import forget_routers
from routing.router.policies import Call, Decision, build_router
from routing.router.versions.services import RouterTrainingError, router_version_admit, router_version_train
from routing.router.versions.truth import fixed_choice, verifier_precision
from routing.tasks import router_retrain
from tests.factories import ApiKeyFactory, InvocationFactory
from tests.support.ledger import call_row, learned_profile, leg, text_of

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_router_cache():
    forget_routers()
    yield
    forget_routers()


def passed_call(profile: TaskProfile, key: ApiKey, i: int, *, correct: bool | None) -> Invocation:
    """A student answer the verifier passed, with a background teacher sample whose comparison found
    it ``correct`` (None: the comparison could not tell)."""
    student = leg("student", "pass") if correct is None else leg("student", "pass", correct=correct)
    return InvocationFactory.create(
        api_key=key,
        profile=profile,
        request={"messages": [{"role": "user", "content": text_of(i)}]},
        legs=[student, leg("teacher", "pass", background=True)],
        route="student",
        served_by="student",
        verdict="pass",
    )


def decide(profile: TaskProfile) -> Decision:
    request = ChatRequest.model_validate({"model": "auto", "messages": [{"role": "user", "content": "x"}]})
    return build_router(profile).route(Call(request, profile, True))


def route_of(profile: TaskProfile) -> tuple[str, str]:
    decision = decide(profile)
    return decision.route, decision.reason


def test_a_weak_verifier_is_measured_and_its_cascade_is_not_the_fallback():
    """Tool-argument schemas pass wrong answers: a third of the passes the samples compared were wrong.
    The cascade's measured quality (0.67) misses the target, so the teacher serves, and says why."""
    profile = learned_profile(name="weak")
    key = ApiKeyFactory.create()
    for i in range(60):
        passed_call(profile, key, i, correct=i % 3 != 0)

    precision = verifier_precision(profile)
    assert (precision.compared_passes, precision.wrong) == (60, 20)
    assert precision.value == pytest.approx(2 / 3) and not precision.strong
    assert "weak" in precision.reason

    choice = fixed_choice(profile)
    assert choice.policy == TaskProfile.Policy.ALWAYS_TEACHER
    assert choice.quality == pytest.approx(2 / 3) and choice.labelled == 60
    assert "misses the target" in choice.reason
    route, reason = route_of(profile)
    assert route == "teacher" and "no active router version" in reason and "misses the target" in reason


def test_a_strong_verifier_is_trusted_and_its_cascade_serves():
    profile = learned_profile(name="strong")
    key = ApiKeyFactory.create()
    for i in range(100):
        passed_call(profile, key, i, correct=True)
    for i in range(100, 200):  # passes no sample compared: labels only because the verifier is strong
        passed_call(profile, key, i, correct=None)

    precision = verifier_precision(profile)
    assert precision.strong and precision.lower is not None and precision.lower >= 0.95
    choice = fixed_choice(profile)
    assert choice.policy == TaskProfile.Policy.STUDENT_WITH_FALLBACK, choice.reason
    assert "meets the target" in choice.reason
    assert route_of(profile)[0] == "student"


def test_too_few_labels_mean_the_teacher():
    profile = learned_profile(name="fresh")
    key = ApiKeyFactory.create()
    for i in range(10):
        passed_call(profile, key, i, correct=True)
    for i in range(10, 100):
        passed_call(profile, key, i, correct=None)  # unknown: not passed

    choice = fixed_choice(profile)
    assert choice.policy == TaskProfile.Policy.ALWAYS_TEACHER and choice.labelled == 10 and choice.unmeasured
    assert "10 labelled calls" in choice.reason
    assert route_of(profile)[0] == "teacher"
    assert decide(profile).sample_boost == 4.0  # sampled more, so that labels come sooner

    chosen = learned_profile(name="chosen", fallback="always_teacher")  # the operator's choice: no boost
    assert decide(chosen).route == "teacher" and decide(chosen).sample_boost == 1.0


def test_a_free_text_profile_with_no_verifier_cannot_admit_a_version_on_unknown_labels():
    """Every student answer sampled, none comparable (free text): nothing is labelled, so nothing
    trains and nothing is admitted; the samples are not counted as passes, nor weighted up."""
    profile = learned_profile(name="prose", verifier={})
    key = ApiKeyFactory.create()
    for i in range(200):
        InvocationFactory.create(
            api_key=key,
            profile=profile,
            request={"messages": [{"role": "user", "content": text_of(i)}]},
            legs=[
                leg("student", "unverified"),
                {**leg("teacher", "unverified", background=True), "sample_rate": 0.05},
            ],
            route="student",
            served_by="student",
            verdict="unverified",
        )

    with pytest.raises(RouterTrainingError, match="labelled"):
        router_version_train(profile=profile, spec=hashing_spec(ngram_dims=256))
    assert router_retrain(profile.pk).startswith("not trained")
    assert not RouterVersion.objects.filter(profile=profile, status=RouterVersion.Status.ACTIVE).exists()
    assert fixed_choice(profile).policy == TaskProfile.Policy.ALWAYS_TEACHER


def test_admission_counts_only_labelled_held_out_calls(settings):
    """The held-out shard's student answers passed a verifier not trusted (no precision is good enough
    here), and no sample compared them: they are not passes, and too few labelled ones remain to judge
    the candidate."""
    router = {**settings.SKILLGATE["ROUTER"], "MIN_HELDOUT_CALLS": 15, "STRONG_VERIFIER_PRECISION": 1.0}
    settings.SKILLGATE = {**settings.SKILLGATE, "ROUTER": router}
    profile = learned_profile(name="heldout")
    key = ApiKeyFactory.create()
    for i in range(200):
        held_out = shard_of(task_id_of({"messages": [{"role": "user", "content": text_of(i)}]})) == 4
        if held_out:
            passed_call(profile, key, i, correct=None)
        else:
            call_row(profile=profile, key=key, text=text_of(i), student_ok=i % 3 != 0)

    version = router_version_admit(
        version=router_version_train(profile=profile, spec=hashing_spec(ngram_dims=256))
    )

    assert version.status == RouterVersion.Status.REJECTED
    assert (
        "labelled held-out calls" in version.status_reason and "unknown correctness" in version.status_reason
    )
    assert version.admission["calls"] == 0 and version.admission["unlabelled"] > 15
