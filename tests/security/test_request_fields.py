"""Callers send data, never library arguments: only documented OpenAI parameters reach a backend.

Each attack sends one of litellm's own keyword arguments (a URL, a key, a mock answer, headers,
retries, ...) through the running server with the real openai SDK (``extra_body`` puts a field at the
top level of the body, as an attacker would). A local listener stands where the attacker's URL points
and must receive nothing; the provider stub must receive nothing either, since the call is refused
with OpenAI's 400 naming the field. After each attack an ordinary call still answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from bench.support.openai_stub import OpenAIStub, Reply
from routing.models import Invocation

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def attacker() -> Iterator[OpenAIStub]:
    """Where a hijacked call would go: it answers like a provider and records whatever reaches it."""
    with OpenAIStub(responder=lambda body: Reply(content="forged by the attacker")) as server:
        yield server


def _litellm_arguments(attacker_url: str) -> dict[str, object]:
    return {
        "api_base": attacker_url,
        "base_url": attacker_url,
        "api_key": "sk-attacker",
        "mock_response": "a forged teacher answer",
        "extra_headers": {"X-Evil": "1"},
        "headers": {"Authorization": "Bearer stolen"},
        "num_retries": 5,
        "max_retries": 5,
        "timeout": 0.001,
        "custom_llm_provider": "openai",
        "api_version": "2024-01-01",
        "organization": "org-evil",
        "deployment_id": "evil",
        "fallbacks": [{"model": "openai/gpt-4o", "api_base": attacker_url}],
        "model_list": [{"model_name": "x", "litellm_params": {"api_base": attacker_url}}],
        "input_cost_per_token": 0,
        "output_cost_per_token": 0,
        "litellm_logging_obj": None,
        "logger_fn": "print",
        "caching": True,
        "drop_params": False,
        "aws_access_key_id": "AKIA",
        "vertex_credentials": "{}",
        "extra_body": {"api_base": attacker_url},
        "proxy_server_request": {"url": attacker_url},
        "user_continue_message": {"role": "user", "content": "x"},
    }


def _client(gateway_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0, timeout=30)


def _ordinary_call_works(gateway_url: str, key: str) -> None:
    reply = _client(gateway_url, key).chat.completions.create(model="auto", messages=HELLO)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "ok"


ATTACK_FIELDS = sorted(_litellm_arguments("http://x"))


@pytest.mark.parametrize("field", ATTACK_FIELDS)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_library_argument_is_refused_and_reaches_no_one(
    gateway_url, backends, api_key, stub, attacker, field, stream
):
    attacker.requests.clear()
    value = _litellm_arguments(attacker.base_url)[field]
    with pytest.raises(openai.BadRequestError) as refused:
        _client(gateway_url, api_key.raw).chat.completions.create(
            model="auto",
            messages=HELLO,  # type: ignore[arg-type]
            stream=stream,
            extra_body={field: value},
        )
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["param"] == field and error["code"] == "unknown_parameter"
    assert field in error["message"]
    assert attacker.requests == [] and attacker.authorizations == []
    assert stub.requests == []
    assert not Invocation.objects.exists()
    _ordinary_call_works(gateway_url, api_key.raw)
    assert attacker.requests == []


@pytest.mark.parametrize(
    ("where", "body_patch", "param"),
    [
        (
            "message",
            {"messages": [{"role": "user", "content": "hi", "api_base": "X"}]},
            "messages[0].api_base",
        ),
        (
            "tool",
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}, "api_base": "X"}]},
            "tools[0].api_base",
        ),
        (
            "stream options",
            {"stream_options": {"include_usage": True, "api_base": "X"}},
            "stream_options.api_base",
        ),
    ],
)
def test_nested_unknown_fields_are_refused_too(
    gateway_url, backends, api_key, stub, attacker, where, body_patch, param
):
    attacker.requests.clear()
    body = {"model": "auto", "messages": HELLO, **body_patch}
    for key, value in list(body.items()):
        if isinstance(value, list | dict):
            body[key] = _with_url(value, attacker.base_url)
    with pytest.raises(openai.BadRequestError) as refused:
        _client(gateway_url, api_key.raw).chat.completions.create(**body)  # type: ignore[call-overload]
    assert isinstance(refused.value.body, dict) and refused.value.body["param"] == param
    assert attacker.requests == [] and stub.requests == []
    _ordinary_call_works(gateway_url, api_key.raw)


def _with_url(value: object, url: str) -> object:
    if isinstance(value, dict):
        return {k: (url if v == "X" else _with_url(v, url)) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_url(v, url) for v in value]
    return value


def test_documented_parameters_still_reach_the_provider(gateway_url, backends, api_key, stub):
    """The allow-list is not a deny-all: OpenAI's own sampling parameters pass through unchanged."""
    _client(gateway_url, api_key.raw).chat.completions.create(
        model="auto",
        messages=HELLO,  # type: ignore[arg-type]
        temperature=0.3,
        top_p=0.9,
        stop=["\n\n"],
        seed=7,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        logit_bias={"50256": -100},
        user="agent-7",
        max_completion_tokens=33,
    )
    sent = stub.requests[-1]
    assert sent["temperature"] == 0.3 and sent["top_p"] == 0.9 and sent["stop"] == ["\n\n"]
    assert sent["seed"] == 7 and sent["max_tokens"] == 33
    assert "metadata" not in sent and "api_base" not in sent
    assert stub.authorizations[-1] != "Bearer sk-attacker"
