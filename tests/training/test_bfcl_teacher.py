"""The BFCL bench's demo teacher: best-of-n on an OpenAI-protocol upstream (the stub standing in for
vLLM), filtered by BFCL's checker; and the constrained request it is asked with."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from bench.bfcl.data import load_items
from bench.bfcl.judge import correct, reference_calls
from bench.bfcl.requests import openai_name, request, response_format
from bench.bfcl_cycle import BfclTeacher, key
from bench.support.openai_stub import OpenAIStub, Reply

ITEM = load_items(categories=("simple",), limit_per_category=1)[0]  # calculate_triangle_area(10, 5)
RIGHT = json.dumps({"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}})
WRONG = json.dumps({"name": "calculate_triangle_area", "arguments": {"base": 3, "height": 5}})


@pytest.fixture
def upstream():
    with OpenAIStub() as stub:
        yield stub


def ask(teacher: BfclTeacher, body: dict) -> httpx.Response:
    return httpx.post(f"{teacher.base_url}/chat/completions", json={"model": "teacher", **body}, timeout=30)


def test_the_first_correct_of_n_answers_is_served_with_the_usage_of_all(upstream):
    upstream.responder = lambda body: Reply(samples=[WRONG, RIGHT, RIGHT, WRONG])
    body = request(ITEM, constrained=True)
    with BfclTeacher(upstream.base_url, "smollm2", {key(body["messages"]): ITEM}, samples=4) as teacher:
        response = ask(teacher, {**body, "temperature": 0})

    assert response.status_code == 200
    [choice] = response.json()["choices"]
    assert json.loads(choice["message"]["content"]) == json.loads(RIGHT)
    [sent] = upstream.requests
    assert (sent["model"], sent["n"], sent["temperature"]) == ("smollm2", 4, 0.8)
    assert sent["response_format"] == body["response_format"]
    assert response.json()["usage"]["completion_tokens"] == 4 * len(RIGHT.split())  # all n answers priced
    assert teacher.counts == {"correct": 1, "none correct": 0, "other": 0}


def test_no_correct_answer_is_a_502_and_other_requests_pass_through(upstream):
    upstream.responder = lambda body: Reply(samples=[WRONG, WRONG], content="distilled advice")
    body = request(ITEM, constrained=True)
    with BfclTeacher(upstream.base_url, "smollm2", {key(body["messages"]): ITEM}, samples=2) as teacher:
        refused = ask(teacher, body)
        other = ask(teacher, {"messages": [{"role": "user", "content": "You maintain a SkillBook"}]})

    assert (
        refused.status_code == 502 and "none of the 2 sampled answers" in refused.json()["error"]["message"]
    )
    assert other.status_code == 200 and other.json()["choices"][0]["message"]["content"] == "distilled advice"
    assert "n" not in upstream.requests[-1]  # not a BFCL item: asked once, as it came
    assert teacher.counts == {"correct": 0, "none correct": 1, "other": 1}


@pytest.mark.parametrize("category", ["simple", "multiple", "parallel", "parallel_multiple"])
def test_the_response_format_admits_the_reference_answer_and_declared_functions_only(category):
    item = load_items(categories=(category,), limit_per_category=1)[0]
    schema = response_format(item)["json_schema"]["schema"]
    calls = [
        {"name": openai_name(name), "arguments": args}
        for call in reference_calls(item)
        for name, args in call.items()
    ]
    answer = calls if "parallel" in category else calls[0]
    jsonschema.validate(answer, schema)
    assert correct(item, {"role": "assistant", "content": json.dumps(answer)})
    stranger = {"name": "undeclared", "arguments": {}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([stranger] if "parallel" in category else stranger, schema)


def test_irrelevance_is_not_constrained():
    item = load_items(categories=("irrelevance",), limit_per_category=1)[0]
    assert response_format(item) is None and "response_format" not in request(item, constrained=True)


@pytest.mark.django_db
def test_the_perfect_router_serves_the_teacher_only_where_it_alone_is_right():
    from decimal import Decimal

    from bench.bfcl_cycle import perfect_router
    from tests.factories import InvocationFactory

    def answer(correct: bool, cost: str) -> dict:
        row = InvocationFactory.create(cost_usd=Decimal(cost))
        return {
            "category": "simple",
            "live": True,
            "correct": correct,
            "error_type": "",
            "invocation": str(row.pk),
        }

    student = [answer(True, "0.001"), answer(False, "0.001"), answer(False, "0.001")]
    teacher = [answer(True, "0.010"), answer(True, "0.010"), answer(False, "0.010")]
    got = perfect_router(student, teacher)
    # item 1: the student is right; item 2: only the teacher; item 3: neither, so the cheaper student
    assert got["correct"] == pytest.approx(2 / 3)
    assert got["cost"] == pytest.approx(0.001 + 0.010 + 0.001)
