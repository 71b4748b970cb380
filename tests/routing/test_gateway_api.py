"""The gateway through the official openai SDK against the running server."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import openai
import pytest

from bench.support.openai_stub import Reply
from routing.models import Backend, Invocation, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.gateway import GOOD, SCHEMA, STUDENT_PRICES, TEACHER_PRICES, by_model, client

pytestmark = pytest.mark.django_db(transaction=True)


def json_profile() -> TaskProfile:
    return TaskProfileFactory.create(
        name="extract",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "json_schema", "schema": SCHEMA},
    )


def test_default_profile_goes_to_the_teacher_and_is_logged(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content="Paris is the capital of France.")
    raw = client(gateway_url, api_key.raw).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Capital of France?"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "Paris is the capital of France."
    assert raw.headers["x-skillgate-route"] == "teacher"
    assert raw.headers["x-skillgate-verdict"] == "unverified"
    assert float(raw.headers["x-skillgate-overhead-ms"]) >= 0
    assert stub.requests[-1]["model"] == "teacher-model"

    row = Invocation.objects.get()
    assert (row.route, row.served_by, row.fallback, row.profile.name) == (
        "teacher",
        "teacher",
        False,
        "default",
    )
    assert len(row.legs) == 1
    usage = completion.usage
    assert usage is not None
    expected = TEACHER_PRICES[0] * usage.prompt_tokens + TEACHER_PRICES[1] * usage.completion_tokens
    assert row.cost_usd == expected
    assert Decimal(row.legs[0]["cost_usd"]) == expected
    assert row.api_key_id == api_key.pk


def test_student_answer_failing_the_schema_falls_back_to_the_teacher(gateway_url, backends, api_key, stub):
    json_profile()
    stub.responder = by_model(student='{"city": "Paris"}', teacher=GOOD)
    raw = client(gateway_url, api_key.raw).chat.completions.with_raw_response.create(
        model="auto",
        messages=[{"role": "user", "content": "Paris facts as JSON"}],
        extra_headers={"X-Skillgate-Task": "extract"},
    )
    assert json.loads(raw.parse().choices[0].message.content or "") == json.loads(GOOD)
    assert raw.headers["x-skillgate-route"] == "student"
    assert raw.headers["x-skillgate-served-by"] == "teacher"
    assert raw.headers["x-skillgate-fallback"] == "true"
    assert raw.headers["x-skillgate-verdict"] == "pass"

    row = Invocation.objects.get()
    assert row.fallback and row.served_by == "teacher" and row.verdict == "pass"
    student_leg, teacher_leg = row.legs
    assert (student_leg["role"], student_leg["verdict"]) == ("student", "fail")
    assert "population" in student_leg["detail"]
    assert (teacher_leg["role"], teacher_leg["verdict"]) == ("teacher", "pass")
    student_cost = (
        STUDENT_PRICES[0] * student_leg["prompt_tokens"]
        + STUDENT_PRICES[1] * student_leg["completion_tokens"]
    )
    teacher_cost = (
        TEACHER_PRICES[0] * teacher_leg["prompt_tokens"]
        + TEACHER_PRICES[1] * teacher_leg["completion_tokens"]
    )
    assert student_cost > 0 and teacher_cost > 0
    assert row.cost_usd == student_cost + teacher_cost


def test_student_answer_that_passes_is_served_by_the_student(gateway_url, backends, api_key, stub):
    json_profile()
    stub.responder = by_model(student=GOOD, teacher="unused")
    raw = client(gateway_url, api_key.raw).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Paris"}], metadata={"task": "extract"}
    )
    assert raw.headers["x-skillgate-served-by"] == "student"
    assert [r["model"] for r in stub.requests] == ["student-model"]
    assert Invocation.objects.get().cost_usd > 0


def test_skillbook_text_is_prepended_for_the_student_only(gateway_url, backends, api_key, stub):
    profile = json_profile()
    profile.skillbook_text = "Always answer with city and population."
    profile.save()
    stub.responder = by_model(student="nope", teacher=GOOD)
    client(gateway_url, api_key.raw).chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "Paris"}], metadata={"task": "extract"}
    )
    student_req, teacher_req = stub.requests
    assert student_req["messages"][0] == {
        "role": "system",
        "content": "Always answer with city and population.",
    }
    assert teacher_req["messages"] == [{"role": "user", "content": "Paris"}]


def test_tool_calls_round_trip_and_are_verified(gateway_url, backends, api_key, stub):
    TaskProfileFactory.create(name="tools", verifier={"kind": "tool_args"})
    tools = [
        {
            "type": "function",
            "function": {
                "name": "restart",
                "parameters": {
                    "type": "object",
                    "properties": {"service": {"type": "string"}},
                    "required": ["service"],
                },
            },
        }
    ]

    def respond(body: dict[str, object]) -> Reply:
        args = '{"service": 5}' if "student" in str(body["model"]) else '{"service": "api"}'
        call = {"id": "call_1", "type": "function", "function": {"name": "restart", "arguments": args}}
        return Reply(content=None, tool_calls=[call])

    stub.responder = respond
    raw = _ask_with_tools(gateway_url, api_key, "restart the api", tools, tool_choice="required")
    message = raw.parse().choices[0].message
    assert message.tool_calls and message.tool_calls[0].function.arguments == '{"service": "api"}'
    assert raw.headers["x-skillgate-served-by"] == "teacher"
    assert stub.requests[0]["tools"][0]["function"]["name"] == "restart"


def test_a_tool_call_with_an_invented_value_falls_back_when_the_profile_checks_values(
    gateway_url, backends, api_key, stub
):
    """The student writes its call as JSON text with a city nobody asked for: the schema check alone would
    pass it; ``check_values`` fails it, so the teacher's call is served and the ledger says why."""
    TaskProfileFactory.create(
        name="tools",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "tool_args", "content_calls": True, "check_values": True},
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]

    def respond(body: dict[str, object]) -> Reply:
        if "student" in str(body["model"]):
            return Reply(content='{"name": "get_weather", "arguments": {"city": "Bergen"}}')
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }
        return Reply(content=None, tool_calls=[call])

    stub.responder = respond
    raw = _ask_with_tools(gateway_url, api_key, "What is the weather in Oslo?", tools)
    message = raw.parse().choices[0].message
    assert message.tool_calls and message.tool_calls[0].function.arguments == '{"city": "Oslo"}'
    assert raw.headers["x-skillgate-served-by"] == "teacher"
    row = Invocation.objects.get()
    student_leg = row.legs[0]
    assert row.fallback and student_leg["role"] == "student" and student_leg["verdict"] == "fail"
    assert "'Bergen' not in the conversation" in student_leg["detail"]


def _ask_with_tools(gateway_url, api_key, user: str, tools: list[dict[str, Any]], **extra: Any):
    """A chat completion on the ``tools`` profile through the openai SDK, with the raw response."""
    return client(gateway_url, api_key.raw).chat.completions.with_raw_response.create(
        model="auto",
        messages=[{"role": "user", "content": user}],
        tools=tools,  # type: ignore[arg-type]
        metadata={"task": "tools"},
        **extra,
    )


def test_models_lists_auto_and_backends(gateway_url, backends, api_key):
    ids = [m.id for m in client(gateway_url, api_key.raw).models.list()]
    assert ids == ["auto", "student", "teacher"]


def test_model_naming_a_backend_forces_that_route(gateway_url, backends, api_key, stub):
    raw = client(gateway_url, api_key.raw).chat.completions.with_raw_response.create(
        model="student", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-skillgate-route"] == "student"
    assert [r["model"] for r in stub.requests] == ["student-model"]


def test_student_uses_the_admitted_adapter_name(gateway_url, backends, api_key, stub):
    Backend.objects.filter(name="student").update(adapter="student-v2")
    client(gateway_url, api_key.raw).chat.completions.create(
        model="student", messages=[{"role": "user", "content": "hi"}]
    )
    assert stub.requests[-1]["model"] == "student-v2"


def test_known_provider_model_is_priced_from_litellms_price_map(gateway_url, backends, api_key, stub):
    import litellm

    Backend.objects.filter(name="teacher").update(
        model="openai/gpt-4o-mini", input_cost_per_token=None, output_cost_per_token=None
    )
    completion = client(gateway_url, api_key.raw).chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hello there"}]
    )
    info = litellm.get_model_info("openai/gpt-4o-mini")
    usage = completion.usage
    assert usage is not None
    expected = (
        Decimal(str(info["input_cost_per_token"])) * usage.prompt_tokens
        + Decimal(str(info["output_cost_per_token"])) * usage.completion_tokens
    )
    row = Invocation.objects.get()
    assert row.cost_usd == expected > 0
    assert stub.requests[-1]["model"] == "gpt-4o-mini"


def test_unpriced_self_hosted_backend_is_a_clear_503(gateway_url, backends, api_key):
    Backend.objects.filter(name="teacher").update(
        model="hosted_vllm/my-model", input_cost_per_token=None, output_cost_per_token=None
    )
    with pytest.raises(openai.APIStatusError) as excinfo:
        client(gateway_url, api_key.raw).chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "hi"}]
        )
    assert excinfo.value.status_code == 503
    assert "set input/output cost per token" in excinfo.value.message
    assert not Invocation.objects.exists()
