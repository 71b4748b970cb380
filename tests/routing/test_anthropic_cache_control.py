"""Anthropic's ``cache_control`` through ``/v1/messages`` (issue 37): a block's breakpoint (system,
user text, tool result) and the request's automatic one reach the chat call's content parts, so the
cache write is priced as on ``/v1/chat/completions``: sent on a backend that prices it (and on to an
Anthropic-protocol teacher through litellm), dropped where no price is set (the upstream writes no cache,
``x-skillgate-cache-write: dropped``); a malformed one is refused in Anthropic's error shape naming
it. Through the running gateway with the official ``anthropic`` SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from routing import price_options
from routing.api.messages.protocol import usage_of
from routing.models import Backend, Invocation, TaskProfile
from tests.factories import TaskProfileFactory, claude_teacher
from tests.support.anthropic_stub import AnthropicStub

pytestmark = pytest.mark.django_db(transaction=True)

PRICED = {price_options.CACHE_WRITE: "0.0000125", price_options.CACHE_WRITE_1H: "0.00002"}
EPHEMERAL = {"type": "ephemeral"}
LONG = "You are a careful assistant. " * 40


def sdk(gateway_url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway_url, api_key=key, max_retries=0)


def request(cached: bool = True, **extra: Any) -> dict[str, Any]:
    """A tool-using conversation with three breakpoints (``cached``), one of them the hour's."""
    body: dict[str, Any] = {
        "model": "auto",
        "max_tokens": 20,
        "system": [
            {"type": "text", "text": "Be terse."},
            {"type": "text", "text": LONG, "cache_control": EPHEMERAL},
        ],
        "messages": [
            {"role": "user", "content": "what is the weather?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "sunny",
                        "cache_control": EPHEMERAL,
                    },
                    {
                        "type": "text",
                        "text": "and tomorrow?",
                        "cache_control": {"type": "ephemeral", "ttl": "1h"},
                    },
                ],
            },
        ],
        **extra,
    }
    if not cached:
        for block in [*body["system"], *body["messages"][2]["content"]]:
            block.pop("cache_control", None)
    return body


def test_breakpoints_reach_the_chat_calls_parts_and_are_priced_at_the_write_price(
    gateway_url, backends, api_key, stub
):
    Backend.objects.filter(pk=backends["teacher"].pk).update(price_options=PRICED)
    reply = sdk(gateway_url, api_key.raw).messages.create(**request())
    assert reply.content[0].text == "ok"
    [sent] = stub.requests
    assert sent["messages"][0] == {
        "role": "system",
        "content": [
            {"type": "text", "text": "Be terse."},
            {"type": "text", "text": LONG, "cache_control": EPHEMERAL},
        ],
    }
    assert sent["messages"][3] == {
        "role": "tool",
        "tool_call_id": "toolu_1",
        "content": [{"type": "text", "text": "sunny", "cache_control": EPHEMERAL}],
    }
    hour = {"type": "ephemeral", "ttl": "1h"}
    assert sent["messages"][4] == {
        "role": "user",
        "content": [{"type": "text", "text": "and tomorrow?", "cache_control": hour}],
    }
    row = Invocation.objects.get()
    assert row.status_code == 200 and row.cost_usd > 0
    # Without breakpoints the same conversation goes as plain strings, as before.
    sdk(gateway_url, api_key.raw).messages.create(**request(cached=False))
    assert stub.requests[-1]["messages"][0]["content"] == f"Be terse.\n{LONG}"
    assert stub.requests[-1]["messages"][3]["content"] == "sunny"


def test_the_top_level_cache_control_marks_the_last_block(gateway_url, backends, api_key, stub):
    Backend.objects.filter(pk=backends["teacher"].pk).update(price_options=PRICED)
    body = {
        "model": "auto",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": "hi"}],
        "cache_control": EPHEMERAL,
    }
    response = httpx.post(
        f"{gateway_url}/v1/messages", json=body, headers={"x-api-key": api_key.raw}, timeout=30
    )
    assert response.status_code == 200, response.text
    assert stub.requests[-1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize(
    ("priced", "hour"),
    [({}, False), ({price_options.CACHE_WRITE: "0.0000125"}, True)],
    ids=["unpriced", "hour-unpriced"],
)
def test_an_unpriced_cache_write_is_dropped_and_the_call_answers(
    gateway_url, backends, api_key, stub, stream, priced, hour
):
    Backend.objects.filter(pk=backends["teacher"].pk).update(price_options=priced)
    client, body = sdk(gateway_url, api_key.raw), request()
    if not hour:
        body["messages"][2]["content"][1]["cache_control"] = EPHEMERAL
    with client.messages.with_streaming_response.create(**body, stream=stream) as response:
        assert response.status_code == 200 and response.headers["x-skillgate-cache-write"] == "dropped"
        response.read()
    [sent] = stub.requests
    assert "cache_control" not in json.dumps(sent)  # no write asked for, so none to bill
    row = Invocation.objects.get()
    assert row.status_code == 200 and "cache_control" in json.dumps(row.request)  # what the caller sent


@pytest.mark.parametrize(
    ("control", "named"),
    [
        ("yes", "system.1.cache_control"),
        ({"type": "persistent"}, "system.1.cache_control"),
        ({"type": "ephemeral", "ttl": "2h"}, "system.1.cache_control.ttl"),
        ({"type": "ephemeral", "scope": "global"}, "system.1.cache_control.scope"),
    ],
    ids=["string", "type", "ttl", "extra"],
)
def test_a_hostile_cache_control_is_a_400_naming_it(gateway_url, backends, api_key, stub, control, named):
    body = request()
    body["system"][1]["cache_control"] = control
    response = httpx.post(
        f"{gateway_url}/v1/messages", json=body, headers={"x-api-key": api_key.raw}, timeout=30
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith(named)
    assert stub.requests == []


@pytest.fixture
def anthropic_teacher(backends: dict[str, Backend]) -> Iterator[tuple[AnthropicStub, Backend]]:
    with AnthropicStub() as upstream:
        yield upstream, claude_teacher(upstream.base_url)


def test_a_breakpoint_reaches_an_anthropic_teacher_through_litellm(
    gateway_url, backends, api_key, anthropic_teacher
):
    upstream, teacher = anthropic_teacher
    Backend.objects.filter(pk=teacher.pk).update(price_options=PRICED)
    TaskProfileFactory.create(name="claude", policy=TaskProfile.Policy.ALWAYS_TEACHER, teacher=teacher)
    client = anthropic.Anthropic(
        base_url=gateway_url,
        api_key=api_key.raw,
        max_retries=0,
        default_headers={"X-Skillgate-Task": "claude"},
    )
    reply = client.messages.create(**request())
    assert reply.content[0].text == "ok from claude"
    sent = upstream.requests[-1]
    system = sent["system"] if isinstance(sent["system"], list) else []
    assert any(block.get("cache_control", {}).get("type") == "ephemeral" for block in system), sent["system"]
    assert "cache_control" in json.dumps(sent["messages"])


def test_the_usage_reports_cache_writes_and_reads_beside_the_input_tokens() -> None:
    # litellm counts written and read tokens in prompt_tokens; Anthropic's usage reports them beside.
    usage = {
        "prompt_tokens": 1300,
        "completion_tokens": 7,
        "cache_creation_input_tokens": 1000,
        "prompt_tokens_details": {"cached_tokens": 200},
    }
    assert usage_of(usage) == {
        "input_tokens": 100,
        "output_tokens": 7,
        "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 200,
    }
    assert usage_of(None)["input_tokens"] == 0 and usage_of({"prompt_tokens": "x"})["input_tokens"] == 0


def test_count_tokens_counts_a_conversation_with_breakpoints(gateway_url, backends, api_key):
    body = request()
    body.pop("max_tokens")  # not a count_tokens parameter; it calls no model, so nothing is written
    counted = sdk(gateway_url, api_key.raw).messages.count_tokens(**body)
    assert counted.input_tokens > len(LONG.split())
