"""The free-text judge: a prose answer with no verifier is labelled by the teacher asked pairwise, in
both orders, through the gateway's call path and on the ledger as learning spend; orders that disagree
leave the answer unknown."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from bench.support.openai_stub import Reply
from routing.call.sampling import sample_run
from routing.ledger.learning_spend import LEARNING_KEY_NAME
from routing.models import Invocation, SampleSpend, TaskProfile
from routing.router.learning import judge
from routing.router.learning.labels import Label
from routing.router.learning.records import record_from_invocation
from tests.factories import InvocationFactory, TaskProfileFactory

STUDENT_ANSWER = "The capital of Australia is Sydney."
TEACHER_ANSWER = "Canberra is the capital of Australia."


def test_both_orders_must_agree() -> None:
    assert judge.combine("A", "B", teacher_ok=True) == Label(True, "judge")  # the student won twice
    assert judge.combine("SAME", "SAME", teacher_ok=True) == Label(True, "judge")
    assert judge.combine("B", "A", teacher_ok=True) == Label(False, "judge")  # the teacher won twice
    assert judge.combine("NEITHER", "A", teacher_ok=True) == Label(False, "judge")
    assert not judge.combine("NEITHER", "B", teacher_ok=True).known
    assert not judge.combine("A", "A", teacher_ok=True).known  # position bias: no label
    assert not judge.combine("B", "B", teacher_ok=True).known
    assert not judge.combine("A", None, teacher_ok=True).known
    assert not judge.combine("B", "A", teacher_ok=False).known  # "wrong" needs a passing reference


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [("A", "A"), (" b. ", "B"), ("**SAME**", "SAME"), ("neither", "NEITHER"), ("A or B", None), ("", None)],
)
def test_a_reply_is_one_word_or_no_verdict(reply: str, verdict: str | None) -> None:
    assert judge.reply_verdict({"role": "assistant", "content": reply}) == verdict


def test_tool_calls_and_empty_answers_are_not_judged() -> None:
    unknown = Label(None)
    prose = {"role": "assistant", "content": "x"}
    call = {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}
    assert judge.judgeable(prose, prose | {"content": "y"}, unknown)
    assert not judge.judgeable(prose, call, unknown)
    assert not judge.judgeable(prose, {"role": "assistant", "content": ""}, unknown)
    assert not judge.judgeable(prose, prose, Label(True, "text_equal"))
    assert not judge.judgeable(prose, {"role": "assistant", "content": '{"total": 1}'}, unknown)


# --- through the gateway's call path, with the stub upstream ----------------------------------------


def free_text_profile() -> TaskProfile:
    return TaskProfileFactory.create(
        name="answers",
        policy=TaskProfile.Policy.LEARNED,
        verifier={},
        policy_params={"teacher_sample_rate": 1.0},
    )


def served_by_student(profile: TaskProfile, key: Any) -> Invocation:
    legs = [
        {
            "backend": "student",
            "role": "student",
            "model": "student",
            "cost_usd": "0.0001",
            "verdict": "unverified",
        }
    ]
    return InvocationFactory.create(
        api_key=key.key,
        profile=profile,
        route="student",
        served_by="student",
        verdict="unverified",
        legs=legs,
        request={
            "model": "auto",
            "messages": [{"role": "user", "content": "What is the capital of Australia?"}],
        },
        response={"message": {"role": "assistant", "content": STUDENT_ANSWER}, "finish_reason": "stop"},
        sample_state=Invocation.SampleState.QUEUED,
    )


def judge_replies(pick: Callable[[str, str], str]) -> Callable[[dict[str, Any]], Reply]:
    """The stub as the teacher: the sample's answer, and ``pick(answer_a, answer_b)`` to a judge question."""

    def reply(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"] != judge.SYSTEM:
            return Reply(content=TEACHER_ANSWER)
        text = body["messages"][-1]["content"]
        a = text.split("<answer_A>\n", 1)[1].split("\n</answer_A>", 1)[0]
        b = text.split("<answer_B>\n", 1)[1].split("\n</answer_B>", 1)[0]
        return Reply(content=pick(a, b))

    return reply


@pytest.mark.django_db(transaction=True)
def test_a_consistent_judge_labels_the_student_wrong_on_the_learning_key(backends, api_key, stub) -> None:
    profile = free_text_profile()
    stub.responder = judge_replies(lambda a, b: "A" if a == TEACHER_ANSWER else "B")
    call = served_by_student(profile, api_key)

    assert sample_run(invocation_id=call.pk) == "done"

    call.refresh_from_db()
    student = call.legs[0]
    assert (student["correct"], student["correct_by"]) == (False, "sample:judge")
    record = record_from_invocation(call)
    assert record.complete and record.needs_teacher is True
    questions = [r for r in stub.requests if r["messages"][0]["content"] == judge.SYSTEM]
    assert len(questions) == 2 and {r["model"] for r in questions} == {"teacher-model"}
    first, second = (q["messages"][-1]["content"] for q in questions)
    assert first.index(STUDENT_ANSWER) < first.index(TEACHER_ANSWER)  # the student was A, then B
    assert second.index(TEACHER_ANSWER) < second.index(STUDENT_ANSWER)
    spent = Invocation.objects.filter(api_key__name=LEARNING_KEY_NAME, requested_model="learning:judge")
    assert spent.count() == 2 and all(Decimal(row.cost_usd) > 0 for row in spent)
    assert SampleSpend.objects.get(profile=profile).calls == 3  # the sample and both questions, under the cap


@pytest.mark.django_db(transaction=True)
def test_a_judge_that_prefers_a_position_gives_no_label(backends, api_key, stub) -> None:
    profile = free_text_profile()
    stub.responder = judge_replies(lambda a, b: "A")
    call = served_by_student(profile, api_key)

    assert sample_run(invocation_id=call.pk) == "done"

    call.refresh_from_db()
    assert "correct" not in call.legs[0]
    assert not record_from_invocation(call).complete  # unknown trains, calibrates and admits nothing


@pytest.mark.django_db(transaction=True)
def test_a_judge_finding_both_the_same_labels_the_student_correct(backends, api_key, stub) -> None:
    profile = free_text_profile()
    stub.responder = judge_replies(lambda a, b: "SAME")
    call = served_by_student(profile, api_key)
    sample_run(invocation_id=call.pk)
    call.refresh_from_db()
    assert (call.legs[0]["correct"], call.legs[0]["correct_by"]) == (True, "sample:judge")


@pytest.mark.django_db(transaction=True)
def test_no_room_under_the_cap_asks_no_question(backends, api_key, stub) -> None:
    profile = free_text_profile()
    stub.responder = judge_replies(lambda a, b: "SAME")
    call = served_by_student(profile, api_key)
    # room for the sample (a short prompt, 10 tokens out: at most $0.0014) and not for a question (its
    # prompt carries the conversation and both answers: over 700 bytes, $0.007 at a token a byte)
    profile.policy_params = {**profile.policy_params, "sample_daily_usd": "0.003"}
    profile.max_tokens = 10
    profile.save()
    assert sample_run(invocation_id=call.pk) == "done"
    call.refresh_from_db()
    assert call.legs[-1]["background"] is True
    assert "correct" not in call.legs[0]
    assert all(r["messages"][0]["content"] != judge.SYSTEM for r in stub.requests)
