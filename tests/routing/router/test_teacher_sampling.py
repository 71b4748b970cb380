"""Background samples of the leg a call did not run: labels on the ledger, under a daily USD cap."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from bench.support.openai_stub import Reply
from routing.call.sampling import draw, sample_run
from routing.models import Invocation, SampleSpend, TaskProfile
from routing.pricing import cost_bound, prices_for, prompt_token_bound
from routing.router.learning.records import record_from_invocation
from tests.factories import InvocationFactory, TaskProfileFactory

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}


def profile_with(**params: object) -> TaskProfile:
    return TaskProfileFactory.create(
        name="totals",
        policy=TaskProfile.Policy.LEARNED,
        verifier={"kind": "json_schema", "schema": SCHEMA},
        max_tokens=100,
        policy_params=params,
    )


def queued_call(
    profile: TaskProfile, key, *, answer: str = '{"total": 1}', route: str = "student"
) -> Invocation:  # type: ignore[no-untyped-def]
    legs = [{"backend": route, "role": route, "model": route, "cost_usd": "0.0001", "verdict": "pass"}]
    return InvocationFactory.create(
        api_key=key.key,
        profile=profile,
        route=route,
        served_by=route,
        verdict="pass",
        legs=legs,
        request={
            "model": "auto",
            "messages": [{"role": "user", "content": "What is the total of receipt 7?"}],
        },
        response={"message": {"role": "assistant", "content": answer}, "finish_reason": "stop"},
        sample_state=Invocation.SampleState.QUEUED,
    )


def test_sampled_spend_never_exceeds_the_daily_cap(backends, api_key, stub):
    profile = profile_with(teacher_sample_rate=1.0)
    stub.responder = lambda body: Reply(content=json.dumps({"total": 1, "note": " ".join(["word"] * 60)}))
    calls = [queued_call(profile, api_key) for _ in range(6)]
    body = {"messages": calls[0].request["messages"], "max_tokens": 100}
    bound = cost_bound(
        prices_for(backends["teacher"]), prompt_tokens=prompt_token_bound(body), max_tokens=100
    )
    cap = Decimal("2.5") * bound  # two worst cases; settling to the actual cost frees room for more
    profile.policy_params = {**profile.policy_params, "sample_daily_usd": str(cap)}
    profile.save()

    states = [sample_run(invocation_id=call.pk) for call in calls]

    assert "done" in states and "capped" in states
    assert states == sorted(states, key=lambda s: s != "done")  # once capped, capped for the day
    spend = SampleSpend.objects.get(profile=profile)
    sampled_costs = [
        Decimal(leg["cost_usd"])
        for call in Invocation.objects.filter(sample_state="done")
        for leg in call.legs
        if leg.get("background")
    ]
    assert spend.spent_usd == sum(sampled_costs) <= cap
    assert spend.calls == len(sampled_costs) == states.count("done")
    assert len(stub.requests) == states.count("done")  # a capped sample never reaches the teacher
    assert Invocation.objects.get(pk=calls[-1].pk).sample_state == "capped"


def test_a_teacher_sample_labels_a_wrong_student_answer_the_verifier_passed(backends, api_key, stub):
    profile = profile_with(teacher_sample_rate=0.25)
    stub.responder = lambda body: Reply(content='{"total": 12.5}')
    call = queued_call(profile, api_key, answer='{"total": 1}')  # valid JSON, wrong number

    assert sample_run(invocation_id=call.pk) == "done"

    call.refresh_from_db()
    student, teacher = call.legs
    assert student["correct"] is False
    assert (teacher["role"], teacher["verdict"], teacher["background"], teacher["sample_rate"]) == (
        "teacher",
        "pass",
        True,
        0.25,
    )
    record = record_from_invocation(call)
    assert record.complete and record.needs_teacher is True
    assert record.meta["sample_rate"] == 0.25
    assert stub.requests[-1]["model"] == "teacher-model"


def test_a_matching_teacher_answer_confirms_the_student(backends, api_key, stub):
    profile = profile_with(teacher_sample_rate=1.0)
    stub.responder = lambda body: Reply(content='{ "total": 1 }')
    call = queued_call(profile, api_key, answer='{"total": 1}')
    sample_run(invocation_id=call.pk)
    call.refresh_from_db()
    assert call.legs[0]["correct"] is True
    assert record_from_invocation(call).needs_teacher is False


def test_a_call_routed_to_the_teacher_gets_a_student_sample(backends, api_key, stub):
    profile = profile_with(student_sample_rate=1.0)
    stub.responder = lambda body: Reply(content='{"sum": 3}')  # the student misses the field
    call = queued_call(profile, api_key, answer='{"total": 3}', route="teacher")

    assert sample_run(invocation_id=call.pk) == "done"

    call.refresh_from_db()
    sampled = call.legs[-1]
    assert (sampled["role"], sampled["verdict"], sampled["background"]) == ("student", "fail", True)
    record = record_from_invocation(call)
    assert record.complete and record.needs_teacher is True
    assert stub.requests[-1]["model"] == "student-model"


def test_a_student_sample_runs_the_profiles_admitted_adapter_and_skillbook(backends, api_key, stub):
    """The label must describe the student that is served: its admitted adapter, its SkillBook."""
    profile = profile_with(student_sample_rate=1.0)
    TaskProfile.objects.filter(pk=profile.pk).update(
        student_adapter="totals-v3", skillbook_text="SkillBook for totals: answer with the total."
    )
    stub.responder = lambda body: Reply(content='{"total": 3}')
    call = queued_call(profile, api_key, answer='{"total": 3}', route="teacher")

    assert sample_run(invocation_id=call.pk) == "done"

    [sent] = stub.requests
    assert sent["model"] == "totals-v3"
    assert sent["messages"][0]["content"].startswith("SkillBook for totals")
    call.refresh_from_db()
    sampled = next(leg for leg in call.legs if leg.get("background"))
    assert sampled["role"] == "student" and sampled["model"].endswith("totals-v3")


def test_a_sample_runs_once(backends, api_key, stub):
    call = queued_call(profile_with(teacher_sample_rate=1.0), api_key)
    assert sample_run(invocation_id=call.pk) == "done"
    assert sample_run(invocation_id=call.pk) == "not queued"
    assert len(stub.requests) == 1
    assert sum(1 for leg in Invocation.objects.get(pk=call.pk).legs if leg.get("background")) == 1


def test_only_auto_routed_calls_of_sampling_profiles_are_drawn(transactional_db):
    learned = profile_with(teacher_sample_rate=1.0, student_sample_rate=0.0)
    fixed = TaskProfileFactory.create(name="fixed", policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK)
    assert draw(profile=learned, route="student", policy="learned", has_student=True) == "teacher"
    assert draw(profile=learned, route="teacher", policy="learned", has_student=True) == ""
    assert draw(profile=learned, route="student", policy="forced", has_student=True) == ""
    assert draw(profile=learned, route="teacher", policy="learned", has_student=False) == ""
    assert draw(profile=fixed, route="student", policy="student_with_fallback", has_student=True) == ""
