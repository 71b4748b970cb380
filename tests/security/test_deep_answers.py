"""A model's answer is as untrusted as a request body: JSON nested thousands of levels deep (a caller can
ask a student to write it) must never reach ``json.loads``'s recursion. Every place that reads an answer's
JSON goes through ``routing.json_body.loads_answer``: the answer is refused or read as text, never a
RecursionError (a 500 on the gateway, a crashed cycle or diagnosis)."""

from __future__ import annotations

import pytest

from bench.bfcl.data import load_items
from bench.bfcl.requests import DecodeError, decode
from bench.support.openai_stub import Reply
from diagnostics.agent.evidence.analyzers.changes import _value
from routing.api.messages.protocol import content_blocks
from routing.json_body import ANSWER_MAX_DEPTH
from routing.models import Invocation, TaskProfile
from routing.verifiers.base import build_verifier
from tests.factories import TaskProfileFactory
from tests.support.gateway import client
from training.services.cycle.skillbook import DistillationError, parse_distilled
from training.services.evolver.plans import parse_plan

DEEP_LIST = "[" * 5000 + "]" * 5000
DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
REQUEST = {"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": TOOLS}


@pytest.mark.parametrize(
    "content",
    [
        f"<tool_call>{DEEP_LIST}</tool_call>",
        f'<tool_call>{{"name": "get_weather", "arguments": {DEEP_OBJECT}}}</tool_call>',
        DEEP_LIST,
        f"```json\n{DEEP_OBJECT}\n```",
    ],
)
def test_the_tool_args_verifier_fails_a_deep_answer_instead_of_raising(content):
    verifier = build_verifier({"kind": "tool_args", "content_calls": True, "check_values": True})
    verdict = verifier.verify(request=REQUEST, message={"role": "assistant", "content": content})
    assert not verdict.passed
    assert f"at most {ANSWER_MAX_DEPTH}" in verdict.detail


def test_a_shallow_answer_just_within_the_bound_is_still_read():
    nested = '{"a":' * (ANSWER_MAX_DEPTH - 2) + '"Oslo"' + "}" * (ANSWER_MAX_DEPTH - 2)
    content = f'<tool_call>{{"name": "get_weather", "arguments": {{"city": {nested}}}}}</tool_call>'
    verdict = build_verifier({"kind": "tool_args", "content_calls": True}).verify(
        request=REQUEST, message={"role": "assistant", "content": content}
    )
    assert not verdict.passed and "city" in verdict.detail  # read, and refused by the schema (not a string)


def test_an_anthropic_tool_use_block_keeps_deep_arguments_as_raw_text():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": DEEP_LIST}}
        ],
    }
    (block,) = content_blocks(message)
    assert block["type"] == "tool_use" and block["input"] == {"_raw_arguments": DEEP_LIST}


def test_learning_and_diagnosis_parsers_refuse_deep_answers_with_their_own_errors():
    with pytest.raises(DistillationError, match="not JSON"):
        parse_distilled(DEEP_OBJECT)
    plan, why = parse_plan(DEEP_OBJECT)
    assert plan is None and f"at most {ANSWER_MAX_DEPTH}" in why
    assert _value(DEEP_LIST) == DEEP_LIST  # a change's value that is not readable JSON stays text
    item = load_items(categories=("simple",), limit_per_category=1)[0]
    with pytest.raises(DecodeError, match="not readable"):
        decode(item, {"role": "assistant", "content": f"<tool_call>{DEEP_LIST}</tool_call>"})
    name = item.functions[0]["name"]
    deep_arguments = f'<tool_call>{{"name": "{name}", "arguments": "{DEEP_LIST}"}}</tool_call>'
    with pytest.raises(DecodeError, match="not readable"):
        decode(item, {"role": "assistant", "content": deep_arguments})


@pytest.mark.django_db(transaction=True)
def test_a_student_writing_deep_json_falls_back_to_the_teacher_through_the_gateway(
    gateway_url, backends, api_key, stub
):
    TaskProfileFactory.create(
        name="tools",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "tool_args", "content_calls": True},
    )

    def respond(body: dict[str, object]) -> Reply:
        if "student" in str(body["model"]):
            return Reply(content=f"<tool_call>{DEEP_LIST}</tool_call>")
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }
        return Reply(content=None, tool_calls=[call])

    stub.responder = respond
    raw = client(gateway_url, api_key.raw).chat.completions.with_raw_response.create(
        model="auto",
        messages=REQUEST["messages"],  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        metadata={"task": "tools"},
    )
    assert raw.status_code == 200 and raw.headers["x-skillgate-served-by"] == "teacher"
    row = Invocation.objects.get()
    assert row.fallback and row.legs[0]["verdict"] == "fail"
    assert "not readable" in row.legs[0]["detail"]
