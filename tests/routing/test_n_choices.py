"""``n`` > 1 on chat completions with the openai SDK: every choice verified, the student's answer served
only when all of its choices pass, else the teacher's with the same n; streamed as whole verified choices
under their indices; budgets hold all n answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from bench.support.openai_stub import Reply
from routing.models import Backend, Invocation, TaskProfile
from routing.pricing import cost_bound, prices_for, prompt_token_bound
from tests.factories import TaskProfileFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
PARIS, LYON, NICE = (json.dumps({"city": c}) for c in ("Paris", "Lyon", "Nice"))
MESSAGES = [{"role": "user", "content": "Which city? Answer as JSON."}]
TASK = {"X-Skillgate-Task": "extract"}


@pytest.fixture
def extract(backends: dict[str, Backend]) -> TaskProfile:
    return TaskProfileFactory.create(
        name="extract",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "json_schema", "schema": SCHEMA},
    )


def client(gateway_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0)


def answers(student: list[str], teacher: list[str]) -> Callable[[dict[str, Any]], Reply]:
    return lambda body: Reply(samples=student if "student" in body["model"] else teacher)


def ask(gateway_url: str, key: str, n: int = 2) -> Any:
    return client(gateway_url, key).chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES, n=n, extra_headers=TASK
    )


def test_both_choices_of_the_student_verified_and_served(gateway_url, extract, api_key, stub):
    stub.responder = answers([PARIS, LYON], [NICE, NICE])
    raw = ask(gateway_url, api_key.raw)
    reply = raw.parse()
    assert [(c.index, c.message.content) for c in reply.choices] == [(0, PARIS), (1, LYON)]
    assert (raw.headers["x-skillgate-served-by"], raw.headers["x-skillgate-verdict"]) == ("student", "pass")
    [sent] = stub.requests
    assert sent["n"] == 2
    row = Invocation.objects.get()
    [leg] = row.legs
    assert leg["verdict"] == "pass"
    assert leg["detail"].startswith("n=2: 2 of 2 verified answers passed; served 1, 2.")
    assert "answer 1 passed" in leg["detail"] and "answer 2 passed" in leg["detail"]
    assert [c["message"]["content"] for c in row.response["choices"]] == [PARIS, LYON]


def test_when_no_choice_passes_the_teacher_answers_with_the_same_n(gateway_url, extract, api_key, stub):
    stub.responder = answers(["no", "nope"], [LYON, NICE])
    raw = ask(gateway_url, api_key.raw)
    assert [c.message.content for c in raw.parse().choices] == [LYON, NICE]
    assert (raw.headers["x-skillgate-served-by"], raw.headers["x-skillgate-fallback"]) == ("teacher", "true")
    assert [(r["model"], r["n"]) for r in stub.requests] == [("student-model", 2), ("teacher-model", 2)]
    row = Invocation.objects.get()
    assert (row.verdict, row.fallback) == ("pass", True)
    student, teacher = row.legs
    assert student["verdict"] == "fail"
    assert student["detail"].startswith("n=2: 0 of 2 verified answers passed")
    assert "answer 1 failed" in student["detail"] and "answer 2 failed" in student["detail"]
    assert teacher["verdict"] == "pass"


def test_one_failing_choice_of_the_student_is_enough_to_fall_back(gateway_url, extract, api_key, stub):
    stub.responder = answers([PARIS, "no"], [LYON, NICE])
    raw = ask(gateway_url, api_key.raw)
    assert [c.message.content for c in raw.parse().choices] == [LYON, NICE]
    student = Invocation.objects.get().legs[0]
    assert student["detail"].startswith("n=2: 1 of 2 verified answers passed")
    assert "answer 1 passed" in student["detail"] and "answer 2 failed" in student["detail"]


def test_failing_teacher_choices_are_served_passing_first_and_marked(gateway_url, extract, api_key, stub):
    stub.responder = answers(["no", "no"], ["bad", NICE])
    raw = ask(gateway_url, api_key.raw)
    assert [c.message.content for c in raw.parse().choices] == [NICE, "bad"]
    assert raw.headers["x-skillgate-verdict"] == "fail"
    detail = Invocation.objects.get().legs[1]["detail"]
    assert detail.startswith("n=2: 1 of 2 verified answers passed; served 2, 1.")


def test_without_a_verifier_the_teacher_answers_n_unverified(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content="hello")
    reply = client(gateway_url, api_key.raw).chat.completions.create(model="auto", messages=MESSAGES, n=3)
    assert [c.message.content for c in reply.choices] == ["hello"] * 3
    assert stub.requests[-1]["n"] == 3
    assert Invocation.objects.get().verdict == "unverified"


def test_a_stream_sends_the_verified_choices_under_their_indices(gateway_url, extract, api_key, stub):
    stub.responder = answers([PARIS, "no"], [LYON, NICE])  # the student falls back, as unstreamed
    stream = client(gateway_url, api_key.raw).chat.completions.create(
        model="auto",
        messages=MESSAGES,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=TASK,
    )
    texts: dict[int, str] = {}
    finished: dict[int, str | None] = {}
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            finished[choice.index] = choice.finish_reason or finished.get(choice.index)
    assert texts == {0: LYON, 1: NICE}
    assert finished == {0: "stop", 1: "stop"}
    assert usage is not None and usage.completion_tokens > 0
    assert all(not r.get("stream") and r["n"] == 2 for r in stub.requests)  # verified whole
    row = Invocation.objects.get()
    assert (row.stream, row.fallback, row.verdict) == (True, True, "pass")


@pytest.mark.parametrize("n", [0, 17, "two"])
def test_refused_n_values_are_400s(gateway_url, backends, api_key, stub, n):
    response = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json={"model": "auto", "messages": MESSAGES, "n": n},
        headers={"Authorization": f"Bearer {api_key.raw}"},
        timeout=30,
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "n"
    assert stub.requests == [] and not Invocation.objects.exists()


def test_the_budget_holds_all_n_answers_of_every_leg(gateway_url, extract, stub):
    student, teacher = Backend.objects.get(name="student"), Backend.objects.get(name="teacher")
    bound = prompt_token_bound({"messages": MESSAGES})

    def worst(answers: int) -> Decimal:
        legs = (student, teacher)
        return sum(
            (cost_bound(prices_for(b), prompt_tokens=bound, max_tokens=4000 * answers) for b in legs),
            Decimal(0),
        )

    stub.responder = answers([PARIS, LYON, NICE], [PARIS, LYON, NICE])

    def status(budget: Decimal) -> int:
        key = make_key(budget_usd=budget)
        return httpx.post(
            f"{gateway_url}/v1/chat/completions",
            json={"model": "auto", "messages": MESSAGES, "max_tokens": 4000, "n": 3},
            headers={"Authorization": f"Bearer {key.raw}", **TASK},
            timeout=30,
        ).status_code

    # Room for the worst case of one answer per leg is not enough: each leg may return three, all paid.
    assert status((worst(1) + worst(3)) / 2) == 402
    assert stub.requests == []
    assert status(worst(3) + Decimal("0.01")) == 200
