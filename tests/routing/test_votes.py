"""Self-consistency: a best-of-n student with ``min_votes`` passes only when that many of its sampled
answers pass the verifier and agree; otherwise the call falls back to the teacher."""

from __future__ import annotations

import openai
import pytest
from django.core.exceptions import ValidationError

from bench.support.openai_stub import Reply
from routing.call.votes import answer_key
from routing.models import Backend, Invocation, TaskProfile
from tests.factories import TaskProfileFactory

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
MESSAGES = [{"role": "user", "content": "Which city? Answer as JSON."}]


def call(name: str, arguments: str) -> dict:
    return {
        "role": "assistant",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def test_answers_that_make_the_same_calls_agree_whatever_their_form():
    assert answer_key(call("f", '{"a": 5, "b": "New  York"}')) == answer_key(
        call("f", '{"b": "new york", "a": 5.0}')
    )
    text = {
        "role": "assistant",
        "content": '<tool_call>{"name": "f", "arguments": {"a": 5, "b": "New York"}}</tool_call>',
    }
    assert answer_key(text) == answer_key(call("f", '{"a": 5, "b": "New York"}'))
    both = {
        "role": "assistant",
        "tool_calls": [*call("f", '{"a": 1}')["tool_calls"], *call("g", "{}")["tool_calls"]],
    }
    swapped = {
        "role": "assistant",
        "tool_calls": [*call("g", "{}")["tool_calls"], *call("f", '{"a": 1}')["tool_calls"]],
    }
    assert answer_key(both) == answer_key(swapped)  # parallel calls in either order


def test_answers_nested_past_the_answer_depth_bound_are_compared_as_text_not_parsed():
    deep = "[" * 5000 + "]" * 5000
    assert answer_key({"content": deep}) == answer_key({"content": deep})
    assert answer_key({"content": deep}).startswith("text:")
    assert answer_key(call("f", deep)) != answer_key(call("f", "[" + deep + "]"))


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (call("f", '{"a": 5}'), call("f", '{"a": 6}')),  # another value
        (call("f", '{"a": 5}'), call("g", '{"a": 5}')),  # another function
        (call("f", '{"a": 5}'), call("f", '{"a": 5, "b": 1}')),  # one more argument
        (call("f", '{"a": [1, 2]}'), call("f", '{"a": [2, 1]}')),  # a list in another order
        ({"content": '{"city": "Paris"}'}, {"content": '{"city": "Lyon"}'}),
        ({"content": "It is Paris."}, {"content": "It is Lyon."}),
        ({"content": "1"}, {"content": "true"}),
    ],
)
def test_answers_that_differ_do_not_agree(one, other):
    assert answer_key(one) != answer_key(other)


def test_texts_agree_across_case_and_spacing_and_bad_input_still_gets_a_key():
    assert answer_key({"content": "Paris,  France"}) == answer_key({"content": "paris, france\n"})
    assert answer_key(call("f", "{not json")) == answer_key(call("f", "{not json"))
    assert answer_key({"content": "<tool_call>{oops</tool_call>"}) != answer_key({"content": "oops"})
    assert answer_key({"content": "[" + "9" * 400 + "]"}) != answer_key({"content": "[" + "9" * 399 + "8]"})
    assert answer_key({"content": None}) == answer_key({})


def test_a_backend_cannot_ask_more_votes_than_answers():
    with pytest.raises(ValidationError, match="min_votes"):
        Backend(name="s", role=Backend.Role.STUDENT, model="openai/m", samples=2, min_votes=3).full_clean(
            validate_unique=False, validate_constraints=False
        )
    Backend(name="s", role=Backend.Role.STUDENT, model="openai/m", samples=3, min_votes=3).full_clean(
        validate_unique=False, validate_constraints=False
    )


@pytest.fixture
def voting_student(backends: dict[str, Backend]) -> TaskProfile:
    Backend.objects.filter(pk=backends["student"].pk).update(samples=3, min_votes=2)
    return TaskProfileFactory.create(
        name="extract",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "json_schema", "schema": SCHEMA},
    )


def ask(gateway_url: str, key: str, model: str = "auto"):
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model=model, messages=MESSAGES, extra_headers={"X-Skillgate-Task": "extract"}
    )


def replies(student: list[str], teacher: str = '{"city": "Rome"}'):
    def respond(body: dict) -> Reply:
        return Reply(samples=student) if body["model"] == "student-model" else Reply(content=teacher)

    return respond


@pytest.mark.django_db(transaction=True)
def test_two_agreeing_passing_answers_are_served_by_the_student(gateway_url, voting_student, api_key, stub):
    stub.responder = replies(['{"city": "Lyon"}', "Paris!", '{ "city" : "lyon" }'])
    raw = ask(gateway_url, api_key.raw)
    assert raw.parse().choices[0].message.content == '{"city": "Lyon"}'
    assert (raw.headers["x-skillgate-served-by"], raw.headers["x-skillgate-verdict"]) == ("student", "pass")
    student_request = next(r for r in stub.requests if r["model"] == "student-model")
    assert (student_request["n"], student_request["temperature"]) == (3, 0.8)
    row = Invocation.objects.get()
    assert row.fallback is False
    assert row.legs[0]["detail"] == "best of 3, 2 must agree: answers 1, 3 passed and agree."


@pytest.mark.django_db(transaction=True)
def test_passing_answers_that_disagree_fall_back_to_the_teacher(gateway_url, voting_student, api_key, stub):
    stub.responder = replies(['{"city": "Lyon"}', '{"city": "Paris"}', "no json"])
    raw = ask(gateway_url, api_key.raw)
    assert raw.parse().choices[0].message.content == '{"city": "Rome"}'
    assert raw.headers["x-skillgate-served-by"] == "teacher"
    row = Invocation.objects.get()
    assert row.fallback is True
    student_leg = row.legs[0]
    assert student_leg["verdict"] == "fail"
    assert student_leg["detail"].startswith(
        "best of 3, 2 must agree: 2 passed, at most 1 agree; the first failure:"
    )


@pytest.mark.django_db(transaction=True)
def test_a_forced_student_call_gets_the_largest_passing_group_marked_failed(
    gateway_url, voting_student, api_key, stub
):
    stub.responder = replies(["no json", '{"city": "Paris"}', '{"city": "Lyon"}'])
    raw = ask(gateway_url, api_key.raw, model="student")
    assert raw.parse().choices[0].message.content == '{"city": "Paris"}'
    assert (raw.headers["x-skillgate-served-by"], raw.headers["x-skillgate-verdict"]) == ("student", "fail")
    assert "at most 1 agree" in Invocation.objects.get().legs[0]["detail"]
