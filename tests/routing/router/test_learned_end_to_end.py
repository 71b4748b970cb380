"""End to end: calls through the live gateway fill the ledger (a real Celery worker runs the
background teacher samples), a router version is trained from those rows, admitted on held-out
replay, and the next calls the router learned need the teacher go straight to the teacher."""

from __future__ import annotations

import openai
import pytest

from routing.ledger import learning_spend
from routing.models import Invocation, RouterVersion, TaskProfile
from routing.router.learning.features import hashing_spec
from routing.router.versions.services import router_version_admit, router_version_train
from routing.router.versions.truth import fixed_choice
from tests.factories import TaskProfileFactory
from tests.support.celery_worker import Worker, celery_worker
from tests.support.learned_router import SCHEMA, ask, easy, hard, student_fails_on_hard

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for_samples(worker: Worker, timeout_s: float = 180) -> None:
    pending = Invocation.SampleState.QUEUED, Invocation.SampleState.RUNNING
    done = lambda: not Invocation.objects.filter(sample_state__in=pending).exists()  # noqa: E731
    worker.wait_until("the background samples", done, timeout_s)


def test_router_learns_from_the_ledger_and_routes_change(gateway_url, backends, api_key, stub, settings):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {
            **settings.SKILLGATE["ROUTER"],
            "MIN_HELDOUT_CALLS": 15,
            "MIN_LABELLED_CALLS": 1000,
            "TEACHER_SAMPLE_RATE": 0.0,
            "STUDENT_SAMPLE_RATE": 0.0,
        },
    }
    profile = TaskProfileFactory.create(
        name="totals",
        policy=TaskProfile.Policy.LEARNED,
        verifier={"kind": "json_schema", "schema": SCHEMA},
        policy_params={
            "teacher_sample_rate": 1.0,
            "student_sample_rate": 1.0,
            "target": 0.97,
            "target_relative": True,
        },
    )
    stub.responder = student_fails_on_hard
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=api_key.raw, max_retries=0)

    with celery_worker("learned-router", loglevel="WARNING") as worker:
        # No active version and too few labelled calls to know what the student does: the teacher
        # serves, and a background student sample of each call labels it (its answer compared).
        for i in range(120):
            route, _ = ask(client, hard(i) if i % 3 == 0 else easy(i))
            assert route == "teacher"
        wait_for_samples(worker)
        assert "labelled calls; the teacher serves" in fixed_choice(profile).reason

        # the clients' calls; each background sample is also a row of its own under the learning key
        rows = Invocation.objects.filter(profile=profile).exclude(policy=learning_spend.POLICY)
        assert rows.count() == 120
        sampled = rows.filter(sample_state=Invocation.SampleState.DONE)
        assert sampled.count() == 120  # every call got its student sample, compared with the teacher
        students = [next(leg for leg in row.legs if leg.get("role") == "student") for row in sampled]
        assert sum(leg.get("correct") is True for leg in students) == 80  # the easy calls
        assert sum(leg.get("correct") is False for leg in students) == 40  # the hard ones fail
        # Labelled now: the cascade's measured quality (the teacher backs every failed verification)
        # meets the target, so with the default minimum of labels it is the fallback again.
        router = {**settings.SKILLGATE["ROUTER"], "MIN_LABELLED_CALLS": 30}
        settings.SKILLGATE = {**settings.SKILLGATE, "ROUTER": router}
        choice = fixed_choice(profile)
        assert choice.policy == "student_with_fallback" and choice.labelled == 120, choice

        version = router_version_train(profile=profile, spec=hashing_spec(ngram_dims=256))
        assert version.status == RouterVersion.Status.CANDIDATE, version.status_reason
        assert version.calibration["met"] and version.calibration["curve"]
        version = router_version_admit(version=version)
        assert version.status == RouterVersion.Status.ACTIVE, version.status_reason
        assert version.threshold is not None
        assert version.admission["pass_rate"] >= version.admission["required_pass_rate"]

        # From here on only the student-routed calls are sampled (by the teacher), so a student request
        # below can only come from a routing decision.
        profile.policy_params = {**profile.policy_params, "student_sample_rate": 0.0}
        profile.save()
        stub.requests.clear()
        for i in range(1000, 1010):
            route, invocation_id = ask(client, hard(i))
            assert route == "teacher"
            row = Invocation.objects.get(pk=invocation_id)
            assert (row.policy, row.router_version_id, row.fallback) == ("learned", version.pk, False)
            assert row.score is not None and row.score >= version.threshold
        assert all("student" not in str(body["model"]) for body in stub.requests)
        easy_ids = []
        for i in range(1000, 1010):
            route, invocation_id = ask(client, easy(i))
            assert route == "student"
            score = Invocation.objects.get(pk=invocation_id).score
            assert score is not None and score < version.threshold
            easy_ids.append(invocation_id)
        # The learned policy's student calls are sampled too, so the next version learns from them.
        wait_for_samples(worker)
        assert Invocation.objects.filter(pk__in=easy_ids, sample_state="done").count() == 10
