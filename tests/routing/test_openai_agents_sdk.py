"""The OpenAI Agents SDK (``openai-agents``) with its default model, the Responses API one
(``OpenAIResponsesModel``), pointed at the running gateway: a tool-using agent runs its turns (the model
asks for the tool, the SDK runs it and sends its output back, the model answers), streamed and not, and
a later run continues the conversation by ``previous_response_id``. The teacher is the local stub."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.models import _openai_shared
from openai import AsyncOpenAI

from bench.support.openai_stub import Reply
from routing.api.responses import RESERVED
from routing.models import Invocation

pytestmark = pytest.mark.django_db(transaction=True)

looked_up: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    looked_up.append(city)
    return f"sunny, 21 C in {city}"


def weather_agent(body: dict[str, Any]) -> Reply:
    """The scripted model: asks for the weather until it has the tool's output, then answers with it."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if not results:
        arguments = json.dumps({"city": "Oslo"})
        call = {
            "id": "call_w1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": arguments},
        }
        return Reply(content=None, tool_calls=[call])
    return Reply(content=f"The weather: {results[-1]}.")


@pytest.fixture
def gateway_client(gateway_url: str, api_key: Any) -> Iterator[AsyncOpenAI]:
    """The SDK's default OpenAI client pointed at the gateway, put back as it was afterwards."""
    before = _openai_shared.get_default_openai_client()
    client = AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key=api_key.raw, max_retries=0)
    set_default_openai_client(client, use_for_tracing=False)
    set_tracing_disabled(True)
    looked_up.clear()
    yield client
    _openai_shared._default_openai_client = before


def test_a_tool_using_agent_runs_its_turns_on_the_responses_api(gateway_client, backends, stub):
    stub.responder = weather_agent
    agent = Agent(name="weather", instructions="Use the tool.", model="auto", tools=[get_weather])

    result = asyncio.run(Runner.run(agent, "What is the weather in Oslo?"))
    assert result.final_output == "The weather: sunny, 21 C in Oslo."
    assert looked_up == ["Oslo"] and len(result.raw_responses) == 2
    # Both model turns came in on the Responses API (their ledger rows carry its facts) ...
    rows = list(Invocation.objects.order_by("created_at"))
    assert len(rows) == 2 and all(RESERVED in row.request["metadata"] for row in rows)
    assert all(row.request["messages"][0] == {"role": "system", "content": "Use the tool."} for row in rows)
    # ... and the second carried the tool call and its output back in chat form.
    second = stub.requests[-1]["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert second[-1] == {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 21 C in Oslo"}
    assert result.last_response_id == f"resp_{rows[-1].id.hex}"


def test_the_default_model_is_the_responses_model(gateway_client):
    from agents.models.multi_provider import MultiProvider

    assert isinstance(MultiProvider().get_model("auto"), OpenAIResponsesModel)


def test_a_streamed_agent_run_and_a_run_continued_by_previous_response_id(gateway_client, backends, stub):
    stub.responder = weather_agent
    agent = Agent(name="weather", instructions="Use the tool.", model="auto", tools=[get_weather])

    async def run() -> tuple[Any, list[Any], Any]:
        streamed = Runner.run_streamed(agent, "Weather in Oslo?")
        kinds = [event.type async for event in streamed.stream_events()]
        stub.responder = lambda body: Reply(content="You asked about Oslo.")
        later = await Runner.run(agent, "What did I ask?", previous_response_id=streamed.last_response_id)
        return streamed, kinds, later

    streamed, kinds, later = asyncio.run(run())
    # (the stub streams a word and a space at a time)
    assert streamed.final_output.strip() == "The weather: sunny, 21 C in Oslo." and looked_up == ["Oslo"]
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    assert later.final_output == "You asked about Oslo."
    # The continued run sent only its new input; the gateway rebuilt the rest from the stored response.
    sent = stub.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[-2]["content"] == streamed.final_output and sent[-1]["content"] == "What did I ask?"
    assert Invocation.objects.filter(stream=True).count() == 2 and Invocation.objects.count() == 3
