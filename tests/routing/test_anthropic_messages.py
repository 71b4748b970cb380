"""The Anthropic Messages API through the running gateway, with the official ``anthropic`` SDK: create,
stream, tools and the tool-result turn, count_tokens, errors in Anthropic's shape, both ways of sending
the key, and a call that falls back from the OpenAI-protocol student to a teacher that speaks
Anthropic's protocol (a local stand-in for Anthropic, reached through litellm)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import anthropic
import httpx
import pytest

from routing.models import Backend, Invocation, TaskProfile
from tests.factories import BackendFactory, TaskProfileFactory
from tests.support.anthropic_stub import AnthropicStub
from tests.support.openai_stub import Reply

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
}


def sdk(gateway_url: str, key: str | None, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway_url, api_key=key, max_retries=0, **kwargs)


def test_create_translates_system_and_turns_and_answers_an_anthropic_message(
    gateway_url, backends, api_key, stub
):
    reply = sdk(gateway_url, api_key.raw).messages.create(
        model="auto",
        max_tokens=50,
        system="Be terse.",
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": [{"type": "text", "text": "say ok"}]},
        ],
        stop_sequences=["END"],
        output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}},
    )
    assert reply.type == "message" and reply.role == "assistant" and reply.model == "auto"
    assert [block.type for block in reply.content] == ["text"] and reply.content[0].text == "ok"
    assert reply.stop_reason == "end_turn"
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    sent = stub.requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "say ok"},
    ]
    assert (sent["max_tokens"], sent["stop"]) == (50, ["END"])
    assert sent["response_format"]["json_schema"]["schema"] == {"type": "object"}
    row = Invocation.objects.get()
    assert row.id.hex == reply.id.removeprefix("msg_") and row.cost_usd > 0


def test_stream_sends_anthropic_events_in_order(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content="one two three")
    client = sdk(gateway_url, api_key.raw)
    with client.messages.stream(
        model="auto", max_tokens=20, messages=[{"role": "user", "content": "count"}]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds and "message_delta" in kinds
    assert final.content[0].text.split() == ["one", "two", "three"]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    assert Invocation.objects.get().stream


def test_tools_tool_use_and_the_tool_result_turn(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content=None, tool_calls=[TOOL_CALL])
    client = sdk(gateway_url, api_key.raw)
    first = client.messages.create(
        model="auto",
        max_tokens=50,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "weather in Oslo?"}],
    )
    assert first.stop_reason == "tool_use"
    use = first.content[0]
    assert (use.type, use.id, use.name, use.input) == ("tool_use", "call_1", "get_weather", {"city": "Oslo"})
    sent = stub.requests[-1]
    assert sent["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    assert sent["tool_choice"] == "required"

    stub.responder = lambda body: Reply(content="It is sunny in Oslo.")
    second = client.messages.create(
        model="auto",
        max_tokens=50,
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "weather in Oslo?"},
            {"role": "assistant", "content": [use.model_dump()]},  # type: ignore[misc,list-item]
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny, 21 C"}],
            },
        ],
    )
    assert second.content[0].text == "It is sunny in Oslo."
    turns = stub.requests[-1]["messages"]
    assert turns[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert turns[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}


def test_streamed_tool_use_arrives_as_input_json_deltas(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content=None, tool_calls=[TOOL_CALL])
    with sdk(gateway_url, api_key.raw).messages.stream(
        model="auto", max_tokens=50, tools=[WEATHER], messages=[{"role": "user", "content": "Oslo?"}]
    ) as stream:
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert deltas == ["input_json_delta"]
    assert final.content[0].input == {"city": "Oslo"} and final.stop_reason == "tool_use"


def test_count_tokens(gateway_url, backends, api_key):
    counted = sdk(gateway_url, api_key.raw).messages.count_tokens(
        model="auto", messages=[{"role": "user", "content": "how many tokens is this sentence?"}]
    )
    assert 5 <= counted.input_tokens <= 40


def test_the_key_may_come_as_x_api_key_or_bearer_and_errors_are_anthropic_shaped(
    gateway_url, backends, api_key
):
    body = {"model": "auto", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    by_bearer = sdk(gateway_url, None, auth_token=api_key.raw).messages.create(**body)
    assert by_bearer.content[0].text == "ok"

    with pytest.raises(anthropic.AuthenticationError) as refused:
        sdk(gateway_url, "sg-nothing.wrong").messages.create(**body)
    assert refused.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "Incorrect or revoked API key."},
    }
    for bad, where in [
        ({**body, "api_base": "http://127.0.0.1:9/"}, "api_base"),
        ({**body, "max_tokens": 0}, "max_tokens"),
        ({**body, "messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ({**body, "messages": [{"role": "user", "content": [{"type": "video"}]}]}, "messages.0.content.0"),
    ]:
        response = httpx.post(f"{gateway_url}/v1/messages", json=bad, headers={"x-api-key": api_key.raw})
        assert response.status_code == 400, response.text
        error = response.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        assert where in error["error"]["message"]
    wrong_method = httpx.get(f"{gateway_url}/v1/messages", headers={"x-api-key": api_key.raw})
    assert wrong_method.status_code == 405 and wrong_method.json()["type"] == "error"
    assert not Invocation.objects.exclude(status_code=200).exists()


@pytest.fixture
def anthropic_teacher(backends: dict[str, Backend]) -> Iterator[tuple[AnthropicStub, Backend]]:
    with AnthropicStub() as upstream:
        teacher = BackendFactory.create(
            name="claude-teacher",
            role=Backend.Role.TEACHER,
            model="anthropic/claude-stub-1",
            api_base=upstream.base_url,
            input_cost_per_token=Decimal("0.000003"),
            output_cost_per_token=Decimal("0.000015"),
        )
        yield upstream, teacher


def test_a_failed_student_falls_back_to_a_teacher_on_another_protocol_and_answers_in_the_callers(
    gateway_url, backends, api_key, stub, anthropic_teacher
):
    upstream, teacher = anthropic_teacher
    TaskProfileFactory.create(
        name="strict",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "regex", "pattern": "claude"},
        student=backends["student"],
        teacher=teacher,
    )
    stub.responder = lambda body: Reply(content="a student answer")  # fails the verifier
    headers = {"X-Skillgate-Task": "strict"}
    reply = sdk(gateway_url, api_key.raw, default_headers=headers).messages.create(
        model="auto", max_tokens=30, messages=[{"role": "user", "content": "who are you?"}]
    )
    assert reply.content[0].text == "ok from claude" and reply.type == "message"
    sent = upstream.requests[-1]  # litellm spoke Anthropic's protocol to it
    assert sent["model"] == "claude-stub-1" and "who are you?" in json.dumps(sent["messages"])
    row = Invocation.objects.get()
    assert (row.route, row.served_by, row.fallback) == ("student", "teacher", True)
    assert [leg["role"] for leg in row.legs] == ["student", "teacher"]

    # The same on the OpenAI protocol: the Anthropic teacher's answer comes back as a chat completion.
    chat = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json={"model": "auto", "messages": [{"role": "user", "content": "who are you?"}]},
        headers={"Authorization": f"Bearer {api_key.raw}", **headers},
    )
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"] == "ok from claude"
    assert json.loads(chat.text)["object"] == "chat.completion"
