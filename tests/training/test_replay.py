"""Replay: failed student calls from the real gateway's ledger become verified demonstrations."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from bench.support.openai_stub import Reply
from routing.models import Invocation, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.cycle import CITIES, city_of, city_prompt, drive, good, is_student, json_profile, responder
from training.models import Demonstration, ReplayAttempt
from training.services.cycle import demonstrations_replay
from training.services.cycle.calls import split_of, task_signature
from training.tasks.cycle import replay_profile

pytestmark = pytest.mark.django_db(transaction=True)

BAD = '{"city": "somewhere"}'  # no country: fails the schema


def teacher_good(body):
    return good(*city_of(body))


def test_failed_student_calls_become_verified_teacher_demonstrations(gateway_url, backends, api_key, stub):
    profile = json_profile()
    stub.responder = responder(student=BAD, teacher=teacher_good)
    calls = drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES[:3]])
    assert all(c.fallback for c in calls)
    requests_before = len(stub.requests)

    result = demonstrations_replay(profile_id=profile.pk)

    assert result.calls == 3
    assert result.accepted == {"teacher": 3, "self_repair": 0}
    assert result.rejected == {"teacher": 0, "self_repair": 3}  # the student's own retries failed again
    replayed = stub.requests[requests_before:]
    # The teacher's passing fallback answers were reused; only the student was asked again, sampled.
    assert len(replayed) == 3 and all(is_student(b) and b["temperature"] == 0.8 for b in replayed)
    demos = Demonstration.objects.order_by("invocation__created_at")
    assert [d.source for d in demos] == ["teacher"] * 3
    signature, _ = task_signature(calls[0].request)
    for demo, call, (city, country) in zip(demos, calls, CITIES, strict=False):
        assert demo.invocation_id == call.pk and demo.profile_id == profile.pk
        assert json.loads(demo.completion) == {"city": city, "country": country}
        assert demo.messages == city_prompt(city, country)
        assert demo.verdict["passed"] is True and demo.verdict["verifier"]["kind"] == "json_schema"
        assert demo.task_signature == signature
        assert demo.split == split_of(demo.messages)


def test_teacher_answer_failing_the_verifier_is_rejected_and_counted(gateway_url, backends, api_key, stub):
    profile = json_profile()
    stub.responder = responder(student=BAD, teacher='{"country": "France"}')
    [call] = drive(gateway_url, api_key.raw, "extract", [city_prompt("Paris", "France")])
    assert call.verdict == Invocation.Verdict.FAIL and call.served_by == "teacher"
    teacher_requests = sum(1 for b in stub.requests if not is_student(b))

    result = demonstrations_replay(profile_id=profile.pk)

    assert result.rejected["teacher"] == 1 and result.accepted["teacher"] == 0
    # The ledger's answer had failed, so the teacher was asked again (and failed again).
    assert sum(1 for b in stub.requests if not is_student(b)) == teacher_requests + 1
    assert not Demonstration.objects.exists()
    attempt = ReplayAttempt.objects.get(source="teacher")
    assert attempt.outcome == "rejected" and "city" in attempt.detail


def test_replaying_again_adds_nothing_and_calls_no_backend(gateway_url, backends, api_key, stub):
    profile = json_profile()
    stub.responder = responder(student=BAD, teacher=teacher_good)
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES[:2]])
    first = demonstrations_replay(profile_id=profile.pk)
    seen = len(stub.requests)

    second = replay_profile(profile.pk)  # the Celery task, run in this process

    assert first.accepted["teacher"] == 2
    assert second["calls"] == 0 and second["demonstrations"] == 0
    assert len(stub.requests) == seen
    assert Demonstration.objects.count() == 2


def test_a_passing_retry_of_the_student_is_kept_as_a_self_repair_pair(gateway_url, backends, api_key, stub):
    profile = json_profile()

    def student(body):  # wrong when greedy, right when sampled
        return BAD if body.get("temperature") == 0 else good(*city_of(body))

    stub.responder = responder(student=student, teacher=teacher_good)
    [call] = drive(gateway_url, api_key.raw, "extract", [city_prompt("Lima", "Peru")])

    result = demonstrations_replay(profile_id=profile.pk)

    assert result.accepted == {"teacher": 1, "self_repair": 1}
    pair = Demonstration.objects.get(source="self_repair")
    assert pair.invocation_id == call.pk and json.loads(pair.completion) == {
        "city": "Lima",
        "country": "Peru",
    }
    teacher = Demonstration.objects.get(source="teacher")
    assert pair.split == teacher.split  # same prompt, same side of the held-out line


def test_a_teacher_down_during_replay_is_tried_again_by_the_next_replay(gateway_url, backends, api_key, stub):
    profile = json_profile()
    stub.responder = responder(student=BAD, teacher='{"country": "Peru"}')
    drive(gateway_url, api_key.raw, "extract", [city_prompt("Lima", "Peru")])
    stub.responder = responder(student=BAD, teacher=Reply(status=503, error="overloaded"))

    with override_settings(
        SKILLGATE={**_skillgate(), "CYCLE": {**_skillgate()["CYCLE"], "SELF_REPAIR_TRIES": 0}}
    ):
        down = demonstrations_replay(profile_id=profile.pk)
        assert down.errors == 1 and not ReplayAttempt.objects.exists()
        stub.responder = responder(student=BAD, teacher=teacher_good)
        up = demonstrations_replay(profile_id=profile.pk)

    assert up.accepted["teacher"] == 1
    assert Demonstration.objects.get().completion == good("Lima", "Peru")


def test_code_demonstrations_are_verified_by_running_the_tasks_tests(
    gateway_url, backends, trusted_key, stub
):
    profile = TaskProfileFactory.create(
        name="code",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "python_tests"},
        allow_call_verifier=True,
    )
    task = {
        "prompt": 'def add(a, b):\n    """The sum of a and b."""\n',
        "entry_point": "add",
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
    }
    right = "```python\ndef add(a, b):\n    return a + b\n```"
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    answers = {"first": right, "second": wrong}

    def teacher(body):
        return answers["first"] if "first" in body["messages"][-1]["content"] else answers["second"]

    stub.responder = responder(student=wrong, teacher=teacher)
    prompts = [
        [{"role": "user", "content": f"{tag}: complete\n{task['prompt']}"}] for tag in ("first", "second")
    ]
    drive(
        gateway_url, trusted_key.raw, "code", prompts, metadata={"verifier": {"kind": "python_tests", **task}}
    )

    result = demonstrations_replay(profile_id=profile.pk)
    assert result.accepted["teacher"] == 1 and result.rejected["teacher"] == 1
    demo = Demonstration.objects.get()
    assert demo.completion == right and demo.verdict["verifier"]["entry_point"] == "add"
    assert demo.request["metadata"]["verifier"]["test"] == task["test"]


def _skillgate():
    from django.conf import settings

    return settings.SKILLGATE


def test_a_best_of_n_teacher_gives_its_first_passing_answer(gateway_url, backends, api_key, stub):
    profile = json_profile()
    stub.responder = responder(student=BAD, teacher='{"country": "Peru"}')
    drive(gateway_url, api_key.raw, "extract", [city_prompt("Lima", "Peru")])
    backends["teacher"].samples = 3
    backends["teacher"].save()
    samples = [BAD, good("Lima", "Peru"), '{"city": "Lima", "country": "Chile"}']
    stub.responder = responder(student=BAD, teacher=Reply(content=BAD, samples=samples))
    seen = len(stub.requests)

    result = demonstrations_replay(profile_id=profile.pk)

    assert result.accepted["teacher"] == 1
    assert Demonstration.objects.get(source="teacher").completion == good("Lima", "Peru")
    [asked] = [b for b in stub.requests[seen:] if not is_student(b)]
    assert asked["n"] == 3 and asked["temperature"] == 0.8


def test_a_student_answer_the_verifier_passed_but_a_teacher_sample_found_wrong_is_replayed(
    gateway_url, backends, api_key, stub
):
    """A weak verifier's false pass: the background sample labelled the student wrong. The teacher's
    answer becomes a demonstration; no self-repair, since the verifier cannot tell a right retry."""
    profile = json_profile()
    stub.responder = responder(student=good("Lyon", "France"), teacher=teacher_good)
    [call] = drive(gateway_url, api_key.raw, "extract", [city_prompt(*CITIES[0])])
    assert call.verdict == "pass" and not call.fallback  # schema-valid, wrong city
    legs = [{**call.legs[0], "correct": False}, {"role": "teacher", "verdict": "pass", "background": True}]
    Invocation.objects.filter(pk=call.pk).update(legs=legs, sample_state=Invocation.SampleState.DONE)
    unlabelled = drive(gateway_url, api_key.raw, "extract", [city_prompt(*CITIES[1])])[0]
    Invocation.objects.filter(pk=unlabelled.pk).update(sample_state=Invocation.SampleState.DONE)

    result = demonstrations_replay(profile_id=profile.pk)

    assert result.calls == 1  # the sampled call whose student answer was confirmed is not replayed
    assert result.accepted == {"teacher": 1, "self_repair": 0}
    demo = Demonstration.objects.get()
    assert json.loads(demo.completion) == {"city": CITIES[0][0], "country": CITIES[0][1]}
    attempt = ReplayAttempt.objects.get(source="self_repair")
    assert attempt.outcome == ReplayAttempt.Outcome.UNVERIFIABLE
