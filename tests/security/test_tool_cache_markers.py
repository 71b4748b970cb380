"""Prompt-cache markers on tools are priced by the one rule (issue 37, class 3).

A tool definition's ``cache_control`` and a tool call's (``/v1/messages``' ``tool_use`` block) ask
the provider for a cache write as a content part's does: litellm carries both on to Anthropic. They
are sent where the backend prices the write (and held at that price), dropped where it does not
(``x-skillgate-cache-write: dropped``, nothing reaches the upstream that could write or bill one),
and a malformed one is a 400 naming it, before any upstream call. Through the running gateway.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing import price_options
from routing.budgets.store import bound_to_cents
from routing.models import Backend, Invocation, TaskProfile
from routing.pricing import attempt_bound, prices_for, terms_of
from tests.factories import TaskProfileFactory, claude_teacher, make_key
from tests.support.anthropic_stub import AnthropicStub

pytestmark = pytest.mark.django_db(transaction=True)

PRICED = {price_options.CACHE_WRITE: "0.0000125", price_options.CACHE_WRITE_1H: "0.00002"}
EPHEMERAL = {"type": "ephemeral"}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
LONG = "Look the weather up for a city. " * 40


def chat_body(tool_mark: Any = EPHEMERAL, call_mark: Any = None) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "type": "function",
        "function": {"name": "get_weather", "description": LONG, "parameters": SCHEMA},
    }
    call: dict[str, Any] = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    if tool_mark is not None:
        tool["cache_control"] = tool_mark
    if call_mark is not None:
        call["cache_control"] = call_mark
    return {
        "model": "auto",
        "max_tokens": 20,
        "tools": [tool],
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
    }


def messages_body(tool_mark: Any = EPHEMERAL, use_mark: Any = None) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": "get_weather", "description": LONG, "input_schema": SCHEMA}
    use: dict[str, Any] = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    if tool_mark is not None:
        tool["cache_control"] = tool_mark
    if use_mark is not None:
        use["cache_control"] = use_mark
    return {
        "model": "auto",
        "max_tokens": 20,
        "tools": [tool],
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
            },
        ],
    }


def post(gateway_url: str, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{gateway_url}{path}",
        json=body,
        headers={"authorization": f"Bearer {key}", "x-api-key": key},
        timeout=60,
    )


def sent_markers(sent: dict[str, Any]) -> tuple[Any, Any]:
    return sent["tools"][0].get("cache_control"), sent["messages"][1]["tool_calls"][0].get("cache_control")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_tool_markers_are_dropped_where_no_write_is_priced(gateway_url, backends, stub, path):
    stub.responder = lambda body: Reply(content="ok")
    hour = {"type": "ephemeral", "ttl": "1h"}
    body = chat_body(EPHEMERAL, hour) if path.endswith("completions") else messages_body(EPHEMERAL, hour)
    response = post(gateway_url, make_key().raw, path, body)
    assert response.status_code == 200, response.text
    assert response.headers["x-skillgate-cache-write"] == "dropped"
    [sent] = stub.requests
    assert "cache_control" not in json.dumps(sent)  # no write asked for, so none to bill
    assert Invocation.objects.get().status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_tool_markers_are_forwarded_and_held_at_the_write_price_where_priced(
    gateway_url, backends, stub, path
):
    teacher = backends["teacher"]
    Backend.objects.filter(pk=teacher.pk).update(price_options=PRICED)
    stub.responder = lambda body: Reply(content="ok")
    hour = {"type": "ephemeral", "ttl": "1h"}
    body = chat_body(EPHEMERAL, hour) if path.endswith("completions") else messages_body(EPHEMERAL, hour)
    response = post(gateway_url, make_key().raw, path, body)
    assert response.status_code == 200, response.text
    assert response.headers["x-skillgate-cache-write"] == "forwarded"
    [sent] = stub.requests
    assert sent_markers(sent) == (EPHEMERAL, hour)

    # Held at the hour's write price: a budget that covers the input price only is refused, unsent.
    terms = terms_of(sent)
    assert (terms.cache_write, terms.cache_write_1h_at) == (
        "messages[1].tool_calls[0].cache_control",
        "messages[1].tool_calls[0].cache_control",
    )
    prices = prices_for(Backend.objects.get(pk=teacher.pk))
    with_write = attempt_bound(prices, sent, max_tokens=20)
    unmarked = {**sent, "tools": [{k: v for k, v in sent["tools"][0].items() if k != "cache_control"}]}
    unmarked["messages"] = [sent["messages"][0], chat_body(None)["messages"][1], *sent["messages"][2:]]
    plain = attempt_bound(prices, unmarked, max_tokens=20)
    assert with_write > plain * 2  # every prompt token at the hour's write price
    short = make_key(budget_usd=bound_to_cents((plain + with_write) / 2))
    assert post(gateway_url, short.raw, path, body).status_code == 402
    assert len(stub.requests) == 1


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/v1/chat/completions", chat_body({"type": "persistent"}), "tools[0].cache_control"),
        ("/v1/chat/completions", chat_body("yes"), "tools[0].cache_control"),
        (
            "/v1/chat/completions",
            chat_body(None, {"type": "ephemeral", "ttl": "2h"}),
            "tool_calls[0].cache_control",
        ),
        (
            "/v1/chat/completions",
            chat_body({"type": "ephemeral", "scope": "global"}),
            "tools[0].cache_control",
        ),
        ("/v1/messages", messages_body({"type": "ephemeral", "ttl": "1d"}), "tools.0.cache_control"),
        ("/v1/messages", messages_body(None, {"type": "x"}), "messages.1.content.0.cache_control"),
    ],
    ids=["chat-type", "chat-string", "chat-call-ttl", "chat-extra", "messages-tool-ttl", "messages-use-type"],
)
def test_a_malformed_tool_marker_is_a_400_naming_it(gateway_url, backends, stub, path, body, named):
    Backend.objects.filter(pk=backends["teacher"].pk).update(price_options=PRICED)
    response = post(gateway_url, make_key().raw, path, body)
    assert response.status_code == 400, response.text
    assert named in response.json()["error"]["message"]
    assert stub.requests == [] and not Invocation.objects.exists()


@pytest.fixture
def anthropic_teacher(backends: dict[str, Backend]) -> Iterator[tuple[AnthropicStub, Backend]]:
    with AnthropicStub() as upstream:
        teacher = claude_teacher(upstream.base_url)
        Backend.objects.filter(pk=teacher.pk).update(price_options=PRICED)
        TaskProfileFactory.create(name="claude", policy=TaskProfile.Policy.ALWAYS_TEACHER, teacher=teacher)
        yield upstream, teacher


def test_tool_markers_reach_an_anthropic_teacher_through_litellm(gateway_url, anthropic_teacher):
    upstream, _ = anthropic_teacher
    response = httpx.post(
        f"{gateway_url}/v1/messages",
        json=messages_body(EPHEMERAL, EPHEMERAL),
        headers={"x-api-key": make_key().raw, "x-skillgate-task": "claude"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    sent = upstream.requests[-1]
    assert sent["tools"][0]["cache_control"]["type"] == "ephemeral", sent["tools"]
    [use] = [block for m in sent["messages"] for block in m["content"] if block.get("type") == "tool_use"]
    assert use["cache_control"]["type"] == "ephemeral"
