"""A best-of-n backend (the demo teacher): n answers in one call, the first that passes wins."""

from __future__ import annotations

import json
from decimal import Decimal

import httpx
import openai
import pytest

from bench.support.openai_stub import Reply
from routing.models import Backend, Invocation, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.gateway import TEACHER_PRICES

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ANSWERS = ["Paris, I think.", json.dumps({"city": "Paris"}), json.dumps({"city": "Lyon"})]
MESSAGES = [{"role": "user", "content": "Which city? Answer as JSON."}]


@pytest.fixture
def best_of_three(backends: dict[str, Backend]) -> TaskProfile:
    Backend.objects.filter(pk=backends["teacher"].pk).update(samples=3)
    return TaskProfileFactory.create(
        name="extract",
        policy=TaskProfile.Policy.ALWAYS_TEACHER,
        verifier={"kind": "json_schema", "schema": SCHEMA},
    )


def client(gateway_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0)


def test_first_passing_answer_of_n_is_served_and_all_n_are_paid(gateway_url, best_of_three, api_key, stub):
    stub.responder = lambda body: Reply(samples=ANSWERS)
    raw = client(gateway_url, api_key.raw).chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES, temperature=0, extra_headers={"X-Skillgate-Task": "extract"}
    )
    assert raw.parse().choices[0].message.content == ANSWERS[1]
    assert (raw.headers["x-skillgate-served-by"], raw.headers["x-skillgate-verdict"]) == ("teacher", "pass")
    sent = stub.requests[-1]
    assert (sent["n"], sent["temperature"]) == (3, 0.8)  # sampling, though the client asked for greedy
    row = Invocation.objects.get()
    assert row.verdict == Invocation.Verdict.PASS
    assert row.legs[0]["detail"].startswith("best of 3: answer 2 passed")
    completion_tokens = sum(len(json.dumps(a).split()) for a in ANSWERS)
    assert row.legs[0]["completion_tokens"] == completion_tokens
    prompt_cost = TEACHER_PRICES[0] * row.legs[0]["prompt_tokens"]
    assert row.cost_usd == prompt_cost + TEACHER_PRICES[1] * completion_tokens


def test_when_no_answer_passes_the_first_is_served_marked_failed(gateway_url, best_of_three, api_key, stub):
    stub.responder = lambda body: Reply(samples=["no", "json", "here"])
    raw = client(gateway_url, api_key.raw).chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES, extra_headers={"X-Skillgate-Task": "extract"}
    )
    assert raw.parse().choices[0].message.content == "no"
    assert raw.headers["x-skillgate-verdict"] == "fail"
    assert Invocation.objects.get().legs[0]["detail"].startswith("best of 3: no answer passed")


def test_a_streamed_call_gets_the_chosen_answer_as_chunks(gateway_url, best_of_three, api_key, stub):
    stub.responder = lambda body: Reply(samples=ANSWERS)
    response = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {api_key.raw}", "X-Skillgate-Task": "extract"},
        json={
            "model": "auto",
            "messages": MESSAGES,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        timeout=30,
    )
    assert response.status_code == 200
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == ANSWERS[1]
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    assert "stream" not in stub.requests[-1] or not stub.requests[-1]["stream"]
    assert Invocation.objects.get().stream is True


def test_without_a_verifier_to_choose_the_backend_is_asked_once(gateway_url, backends, api_key, stub):
    Backend.objects.filter(pk=backends["teacher"].pk).update(samples=3)
    stub.responder = lambda body: Reply(content="plain", samples=ANSWERS)
    reply = client(gateway_url, api_key.raw).chat.completions.create(model="auto", messages=MESSAGES)
    assert reply.choices[0].message.content == "plain"
    assert "n" not in stub.requests[-1]
    assert Invocation.objects.get().cost_usd > Decimal(0)


def test_the_budget_holds_every_answer_of_a_best_of_n_leg(gateway_url, best_of_three, stub):
    from routing.pricing import cost_bound, prices_for, prompt_token_bound
    from tests.factories import make_key

    teacher = Backend.objects.get(role=Backend.Role.TEACHER)
    body = {"messages": MESSAGES, "max_tokens": 4000}  # worst cases far apart (holds round up to cents)
    one_answer = cost_bound(prices_for(teacher), prompt_tokens=prompt_token_bound(body), max_tokens=4000)
    three_answers = cost_bound(prices_for(teacher), prompt_tokens=prompt_token_bound(body), max_tokens=12000)
    stub.responder = lambda body: Reply(samples=ANSWERS)

    def ask(budget: Decimal) -> int:
        key = make_key(budget_usd=budget)
        return httpx.post(
            f"{gateway_url}/v1/chat/completions",
            json={"model": "auto", "messages": MESSAGES, "max_tokens": 4000},
            headers={"Authorization": f"Bearer {key.raw}", "X-Skillgate-Task": "extract"},
            timeout=30,
        ).status_code

    # Room for one answer's worst case is not enough: the leg may return three, all paid.
    assert ask((one_answer + three_answers) / 2) == 402
    assert ask(three_answers + Decimal("0.01")) == 200
