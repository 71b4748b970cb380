"""The Anthropic Messages API through the running gateway, with the official ``anthropic`` SDK: create,
stream, tools and the tool-result turn, count_tokens, errors in Anthropic's shape, both ways of sending
the key, and a call that falls back from the OpenAI-protocol student to a teacher that speaks
Anthropic's protocol (a local stand-in for Anthropic, reached through litellm)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.models import Backend, Invocation, TaskProfile
from tests.factories import TaskProfileFactory, claude_teacher
from tests.support.anthropic_stub import AnthropicStub

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
        teacher = claude_teacher(upstream.base_url)
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


def test_a_claude_code_shaped_request_with_its_query_string_betas_and_extra_fields(
    gateway_url, backends, api_key, stub
):
    """What Claude Code 2.1 sends (captured): ``?beta=true``, a list of ``anthropic-beta`` flags, system
    blocks with ``cache_control``, a JSON ``metadata.user_id``, adaptive ``thinking``,
    ``context_management``, ``output_config.effort`` and a system turn made of blocks, streamed. Its
    breakpoints are cache writes, so the teacher prices them (test_anthropic_cache_control.py)."""
    Backend.objects.filter(pk=backends["teacher"].pk).update(
        price_options={"cache_write_input_cost_per_token": "0.0000125"}
    )
    stub.responder = lambda body: Reply(content="done")
    body: Any = {
        "model": "auto",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1;"},
            {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
            {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
        ],
        "tools": [{**WEATHER, "cache_control": {"type": "ephemeral"}}],
        "metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "s"})},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
    }
    headers = {
        "x-api-key": api_key.raw,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,advanced-tool-use-2025-11-20",
        "anthropic-dangerous-direct-browser-access": "true",
        "x-app": "cli",
    }
    with httpx.stream(
        "POST", f"{gateway_url}/v1/messages?beta=true", json=body, headers=headers, timeout=30
    ) as response:
        assert response.status_code == 200, response.read()
        kinds = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_delta" in kinds
    sent = stub.requests[-1]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "system"]
    agent = {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}}
    assert sent["messages"][0]["content"][-1] == agent
    assert sent["reasoning_effort"] == "high" and [t["function"]["name"] for t in sent["tools"]] == [
        "get_weather"
    ]
    row = Invocation.objects.get()
    assert (row.endpoint, row.status_code) == ("/v1/messages", 200)
    # count_tokens takes the same query string (its 400: max_tokens and stream are not its parameters).
    counted = httpx.post(
        f"{gateway_url}/v1/messages/count_tokens?beta=true", json=body, headers=headers, timeout=30
    )
    assert counted.status_code == 400 and counted.json()["error"]["type"] == "invalid_request_error"


TOO_LONG = (
    "This model's maximum context length is 2048 tokens. However, your prompt contains at least 2049 "
    "input tokens, which exceeds this limit even without any output tokens."
)


def test_a_prompt_longer_than_the_backends_window_is_a_400_in_each_callers_protocol(
    gateway_url, backends, api_key, stub
):
    """vLLM's refusal of a prompt over its window (as SmolLM2's 2048 tokens refuse Claude Code's and
    Codex's prompts) is the caller's 400, so an agent CLI stops at once instead of retrying a 502."""
    stub.responder = lambda body: Reply(status=400, error=TOO_LONG)
    client = sdk(gateway_url, api_key.raw)
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="auto", max_tokens=10, messages=[{"role": "user", "content": "long"}])
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "maximum context length is 2048 tokens" in refused.value.message
    streamed = client.messages.stream(
        model="auto", max_tokens=10, messages=[{"role": "user", "content": "x"}]
    )
    with pytest.raises(anthropic.BadRequestError), streamed as stream:
        list(stream)
    headers = {"Authorization": f"Bearer {api_key.raw}"}
    for path, body in [
        ("/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": "long"}]}),
        ("/v1/responses", {"model": "auto", "input": "long", "stream": True}),
    ]:
        response = httpx.post(f"{gateway_url}{path}", json=body, headers=headers, timeout=30)
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"]["code"] == "context_length_exceeded"
    rows = list(Invocation.objects.all())
    assert len(rows) == 4 and {(row.status_code, row.cost_usd) for row in rows} == {(400, 0)}


def test_a_large_tool_input_reaches_the_backend_whole_and_compact(gateway_url, backends, api_key, stub):
    # Past 64 KB the arguments are orjson's compact encoding (json.dumps cost the loop 6-20 ms per
    # 3 MB), the same value; below, json.dumps's spacing as before.
    big = {"rows": ["x" * 1000] * 100, "n": 5, "city": "Tromsø"}
    body = {
        "model": "auto",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": big}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        ],
    }
    headers = {"x-api-key": api_key.raw, "anthropic-version": "2023-06-01"}
    for value, compact in ((big, True), ({**big, "rows": ["x"]}, False)):
        body["messages"][1]["content"][0]["input"] = value  # type: ignore[index]
        response = httpx.post(f"{gateway_url}/v1/messages", json=body, headers=headers, timeout=60)
        assert response.status_code == 200, response.text[:300]
        arguments = stub.requests[-1]["messages"][1]["tool_calls"][0]["function"]["arguments"]
        assert json.loads(arguments) == value
        assert arguments.startswith('{"rows":["x') is compact
