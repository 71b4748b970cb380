"""The OpenAI Responses API through the running gateway, with the real openai SDK: create (text and
items), the typed stream events, function tools and the function_call_output turn, ``text.format``
checked by a json_schema verifier, bad input as OpenAI's 400s, the OpenAPI document, a Codex-shaped
request (namespaced and hosted tools). Stored responses: test_responses_store.py."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.api.responses import ResponsesRequest
from routing.models import Invocation, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.gateway import client as sdk

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
}


def test_create_from_text_answers_a_response_with_the_gateway_headers(gateway_url, backends, api_key, stub):
    raw = sdk(gateway_url, api_key.raw).responses.with_raw_response.create(
        model="auto",
        instructions="Be terse.",
        input="say ok",
        max_output_tokens=40,
        temperature=0.3,
        metadata={"team": "sre"},
        reasoning={"effort": "low"},
        user="u-1",
    )
    response = raw.parse()
    assert response.object == "response" and response.status == "completed"
    assert response.output_text == "ok" and response.output[0].type == "message"
    assert response.instructions == "Be terse." and response.metadata == {"team": "sre"}
    assert response.usage is not None and response.usage.input_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    sent = stub.requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "say ok"},
    ]
    assert (sent["max_tokens"], sent["temperature"], sent["reasoning_effort"]) == (40, 0.3, "low")
    assert "metadata" not in sent and "store" not in sent  # gateway-only
    row = Invocation.objects.get()
    assert row.request["user"] == "u-1"  # kept as a chat call's (not sent to OpenAI-compatible servers)
    assert response.id == f"resp_{row.id.hex}" and row.cost_usd > 0
    assert raw.headers["x-skillgate-invocation"] == str(row.id)
    assert raw.headers["x-skillgate-route"] == "teacher"


def test_create_from_items_translates_roles_images_and_tool_turns(gateway_url, backends, api_key, stub):
    items: Any = [  # as plain JSON: the SDK's TypedDicts cannot tell an assistant item's kind
        {"role": "developer", "content": "Answer in English."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "what is in this image?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
            ],
        },
        {"role": "assistant", "content": [{"type": "output_text", "text": "a cat", "annotations": []}]},
        {"type": "function_call", "call_id": "c9", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c9", "output": "sunny"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "user", "content": "thanks"},
    ]
    response = sdk(gateway_url, api_key.raw).responses.create(model="auto", input=items)
    assert response.output_text == "ok"
    assert stub.requests[-1]["messages"] == [
        {"role": "developer", "content": "Answer in English."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is in this image?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            ],
        },
        {
            "role": "assistant",
            "content": "a cat",
            "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c9", "content": "sunny"},
        {"role": "user", "content": "thanks"},
    ]


def test_stream_sends_the_typed_events_in_order(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content="one two three")
    client = sdk(gateway_url, api_key.raw)
    with client.responses.stream(model="auto", input="count") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert "".join(deltas).split() == ["one", "two", "three"] and len(deltas) == 3
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert final.output_text.split() == ["one", "two", "three"] and final.status == "completed"
    assert final.usage is not None and final.usage.output_tokens > 0
    row = Invocation.objects.get()
    assert row.stream and final.id == f"resp_{row.id.hex}"
    # The stored response is the streamed one.
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_function_tools_the_call_and_the_function_call_output_turn(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content=None, tool_calls=[TOOL_CALL])
    client = sdk(gateway_url, api_key.raw)
    first = client.responses.create(
        model="auto",
        input="weather in Oslo?",
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    [call] = first.output
    assert call.type == "function_call" and (call.call_id, call.name) == ("call_1", "get_weather")
    assert json.loads(call.arguments) == {"city": "Oslo"} and first.output_text == ""
    sent = stub.requests[-1]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER["parameters"],
                "strict": True,
            },
        }
    ]
    assert (sent["tool_choice"], sent["parallel_tool_calls"]) == ("required", False)
    assert first.tools[0].model_dump()["name"] == "get_weather" and first.tool_choice == "required"

    stub.responder = lambda body: Reply(content="It is sunny in Oslo.")
    second = client.responses.create(
        model="auto",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        input=[
            {"role": "user", "content": "weather in Oslo?"},
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"},
        ],
    )
    assert second.output_text == "It is sunny in Oslo."
    turns = stub.requests[-1]["messages"]
    assert turns[1]["tool_calls"][0]["function"] == TOOL_CALL["function"]
    assert turns[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}
    assert stub.requests[-1]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_streamed_function_call_arrives_as_argument_deltas(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content=None, tool_calls=[TOOL_CALL])
    with sdk(gateway_url, api_key.raw).responses.stream(
        model="auto", input="Oslo?", tools=[WEATHER]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    assert kinds.index("response.function_call_arguments.done") < kinds.index("response.output_item.done")
    [call] = final.output
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Oslo"}


def test_text_format_json_schema_is_the_response_format_and_is_verified(gateway_url, backends, api_key, stub):
    TaskProfileFactory.create(
        name="extract",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        student=backends["student"],
        teacher=backends["teacher"],
    )
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    # The student's answer is not JSON: the verifier the schema implies fails it, the teacher answers.
    stub.responder = lambda body: Reply(
        content='{"city": "Oslo"}' if body["model"] == "teacher-model" else "Oslo, I think"
    )
    raw = sdk(gateway_url, api_key.raw).responses.with_raw_response.create(
        model="auto",
        input="Where? Answer as JSON.",
        metadata={"task": "extract"},
        text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}},
    )
    response = raw.parse()
    assert json.loads(response.output_text) == {"city": "Oslo"}
    assert response.text is not None and response.text.format.type == "json_schema"
    formats = [request["response_format"] for request in stub.requests]
    assert formats and all(f["json_schema"]["schema"] == schema for f in formats)
    row = Invocation.objects.get()
    assert (row.route, row.served_by, row.fallback) == ("student", "teacher", True)
    assert raw.headers["x-skillgate-fallback"] == "true"


def _post(gateway_url: str, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{gateway_url}/v1/responses", json=body, headers={"Authorization": f"Bearer {key}"})


def test_bad_input_gets_openai_shaped_400s_and_never_reaches_a_backend(gateway_url, backends, api_key, stub):
    body: dict[str, Any] = {"model": "auto", "input": "hi"}
    for bad, param in [
        ({**body, "api_base": "http://127.0.0.1:9/"}, "api_base"),
        ({**body, "base_url": "http://127.0.0.1:9/"}, "base_url"),
        ({**body, "input": [{"role": "user", "content": "x", "api_key": "k"}]}, "input[0].api_key"),
        ({**body, "input": [{"type": "video", "url": "x"}]}, "input[0]"),
        (
            {**body, "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0]",
        ),
        (
            {**body, "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0]",
        ),
        ({**body, "tools": [{"type": "custom", "name": "patch"}]}, "tools[0]"),
        ({**body, "tools": [WEATHER, WEATHER]}, "tools"),
        ({**body, "tools": [{**WEATHER, "api_base": "x"}]}, "tools[0].api_base"),
        ({**body, "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({**body, "max_output_tokens": 0}, "max_output_tokens"),
        ({**body, "temperature": 3}, "temperature"),
        ({**body, "metadata": {"skillgate_response": {"store": True}}}, "metadata"),
        ({**body, "background": True}, "background"),
        ({**body, "input": []}, "input"),
        ({"model": "auto"}, "input"),
    ]:
        response = _post(gateway_url, api_key.raw, bad)
        assert response.status_code == 400, (bad, response.text)
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param, (bad, error)
        assert set(error) == {"message", "type", "param", "code"}
    unknown = _post(gateway_url, api_key.raw, {**body, "api_base": "x"}).json()["error"]
    assert unknown["code"] == "unknown_parameter"
    not_json = httpx.post(
        f"{gateway_url}/v1/responses", content=b"{", headers={"Authorization": f"Bearer {api_key.raw}"}
    )
    assert not_json.status_code == 400 and "error" in not_json.json()
    assert _post(gateway_url, "sg-nothing.wrong", body).status_code == 401
    for path in ("/v1/responses/not-an-id", "/v1/responses/resp_" + "0" * 32):
        missing = httpx.get(f"{gateway_url}{path}", headers={"Authorization": f"Bearer {api_key.raw}"})
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"
    wrong = httpx.put(
        f"{gateway_url}/v1/responses/resp_x", headers={"Authorization": f"Bearer {api_key.raw}"}
    )
    assert wrong.status_code == 405 and wrong.headers["allow"] == "DELETE, GET"
    for path in ("/v1/responses/resp_x/output_items", "/v1/responses/resp_x/input_items/x"):
        deep = httpx.get(f"{gateway_url}{path}")
        assert deep.status_code == 404 and deep.json()["error"]["code"] == "unknown_url"
    assert stub.requests == [] and not Invocation.objects.exists()


def test_the_openapi_document_describes_the_responses_endpoints(gateway_url):
    document = httpx.get(f"{gateway_url}/v1/openapi.json").json()
    assert set(document["paths"]["/v1/responses"]) == {"post"}
    assert set(document["paths"]["/v1/responses/{response_id}"]) == {"parameters", "get", "delete"}
    body = document["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    request = document["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    # The document is the allow-list: exactly the fields the parser accepts, and no others.
    assert set(request["properties"]) == set(ResponsesRequest.model_fields)
    assert request["additionalProperties"] is False and request["required"] == ["model", "input"]
    # Chat's and the Responses API's models of the same name both survive, apart.
    assert {"routing__protocol__StreamOptions", "routing__api__responses__protocol__StreamOptions"} <= set(
        document["components"]["schemas"]
    )


def test_a_codex_shaped_request_offers_the_functions_and_answers_a_namespaced_call(
    gateway_url, backends, api_key, stub
):
    """Codex sends its sub-agent tools as a namespace, a hosted web_search tool and client_metadata: the
    backend is offered every function and not the hosted tool; a call of a namespaced function comes back
    with its namespace, streamed and stored alike."""
    spawn = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}, "strict": False}
    namespace = {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.",
        "tools": [spawn],
    }
    call = {"id": "call_9", "type": "function", "function": {"name": "spawn_agent", "arguments": "{}"}}
    stub.responder = lambda body: Reply(content=None, tool_calls=[call])
    body: Any = {
        "model": "auto",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}],
        "tools": [WEATHER, namespace, {"type": "web_search", "external_web_access": False}],
        "extra_body": {"client_metadata": {"session_id": "s-1"}},  # the SDK has no such argument
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"summary": "auto"},
        "store": True,
    }
    client = sdk(gateway_url, api_key.raw)
    stored = client.responses.create(**body)
    assert [t["function"]["name"] for t in stub.requests[-1]["tools"]] == ["get_weather", "spawn_agent"]
    assert "client_metadata" not in stub.requests[-1]
    made = stored.output[0]
    assert (made.type, made.name, made.namespace, made.call_id) == (
        "function_call",
        "spawn_agent",
        "multi_agent_v1",
        "call_9",
    )
    assert client.responses.retrieve(stored.id).output[0].namespace == "multi_agent_v1"
    with client.responses.stream(**body) as stream:
        done = [event.item for event in stream if event.type == "response.output_item.done"]
    assert [(item.name, item.namespace) for item in done] == [("spawn_agent", "multi_agent_v1")]
