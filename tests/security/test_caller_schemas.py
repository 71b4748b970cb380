"""A caller's JSON Schema is data (routing/schemas.py): it fetches nothing, reads no file, runs no
backtracking regex and is bounded before any work, in every place a schema arrives (chat
``response_format`` and ``tools``, Responses ``text.format`` and ``tools``, Messages
``output_config.format`` and ``tools``). Each attack goes through the running server with a real client
shape; it is a 400 in the caller's protocol, nothing reaches the listener where the schema points or the
provider, no row is written, and an ordinary call sent meanwhile answers in under 2 s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from routing.models import Invocation, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.attacks import during, listener

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

HELLO = [{"role": "user", "content": "hi"}]


def _places(schema: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every place of every protocol a caller's schema arrives, as (path, body)."""
    return {
        "chat.response_format": (
            "/v1/chat/completions",
            {"model": "auto", "messages": HELLO,
             "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}},
        ),
        "chat.tools": (
            "/v1/chat/completions",
            {"model": "auto", "messages": HELLO,
             "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]},
        ),
        "chat.functions": (
            "/v1/chat/completions",
            {"model": "auto", "messages": HELLO, "functions": [{"name": "f", "parameters": schema}]},
        ),
        "responses.text.format": (
            "/v1/responses",
            {"model": "auto", "input": "hi",
             "text": {"format": {"type": "json_schema", "name": "x", "schema": schema}}},
        ),
        "responses.tools": (
            "/v1/responses",
            {"model": "auto", "input": "hi",
             "tools": [{"type": "function", "name": "f", "parameters": schema}]},
        ),
        "messages.output_config": (
            "/v1/messages",
            {"model": "auto", "max_tokens": 5, "messages": HELLO,
             "output_config": {"format": {"type": "json_schema", "schema": schema}}},
        ),
        "messages.tools": (
            "/v1/messages",
            {"model": "auto", "max_tokens": 5, "messages": HELLO,
             "tools": [{"name": "f", "input_schema": schema}]},
        ),
    }  # fmt: skip


PLACES = sorted(_places({}))


def _send(gateway_url: str, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "anthropic-version": "2023-06-01"}
    return httpx.post(gateway_url + path, content=json.dumps(body), headers=headers, timeout=30)


def _refused(response: httpx.Response, path: str, *words: str) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    if path == "/v1/messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    else:
        assert body["error"]["type"] == "invalid_request_error"
    for word in words:
        assert word in body["error"]["message"], body["error"]["message"]


def _attack(gateway_url, api_key, stub, place: str, schema: dict[str, Any], *words: str) -> None:
    path, body = _places(schema)[place]
    stub.requests.clear()
    [response] = during(lambda: _send(gateway_url, api_key.raw, path, body), gateway_url, api_key.raw)
    _refused(response, path, *words)
    assert Invocation.objects.count() == 1  # the ordinary call's row; the attack wrote none
    assert all(request["messages"][-1]["content"] == "hi" for request in stub.requests)  # the plain call only


@pytest.mark.parametrize("place", PLACES)
def test_a_remote_ref_is_refused_and_nothing_is_fetched(gateway_url, backends, api_key, stub, place):
    with listener() as attacker:
        url = f"http://127.0.0.1:{attacker.port}/schema.json"
        _attack(
            gateway_url, api_key, stub, place, {"type": "object", "properties": {"a": {"$ref": url}}}, "$ref"
        )
        assert attacker.requests == [] and attacker.authorizations == []


@pytest.mark.parametrize("place", PLACES)
def test_a_file_ref_is_refused_and_no_file_is_read(
    gateway_url, backends, api_key, stub, place, tmp_path: Path
):
    secret = tmp_path / "schema.json"
    secret.write_text('{"type": "integer"}')
    schema = {"$id": "file:///", "properties": {"a": {"$ref": secret.as_uri()}}}
    _attack(gateway_url, api_key, stub, place, schema, "$ref")


@pytest.mark.parametrize("place", PLACES)
def test_a_ref_that_does_not_resolve_is_a_400_not_a_500(gateway_url, backends, api_key, stub, place):
    _attack(gateway_url, api_key, stub, place, {"properties": {"a": {"$ref": "#/$defs/missing"}}}, "missing")


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "string", "pattern": "a" * 700_000}, ("bytes",)),  # past the size bound, refused unread
        ({"type": "string", "pattern": "(a|aa)*" * 200}, ("pattern",)),  # past the pattern bound
        ({"$defs": {f"d{i}": {"type": "integer"} for i in range(8_000)}}, ("bytes",)),  # 216 KB
        ({"anyOf": [{"anyOf": [{}] * 6}] * 1200}, ("objects",)),  # small in bytes, many subschemas
        ({"type": "string", "pattern": "(?<=a)b"}, ("regex",)),  # lookbehind: needs a backtracking engine
    ],
    ids=["700KB-pattern", "long-pattern", "8k-defs", "many-subschemas", "lookbehind"],
)
def test_an_oversized_or_backtracking_schema_is_refused_at_once(
    gateway_url, backends, api_key, stub, schema, words
):
    _attack(gateway_url, api_key, stub, "chat.response_format", schema, *words)


def test_a_catastrophic_pattern_runs_in_linear_time_and_stalls_no_one(gateway_url, backends, api_key, stub):
    """``^(a+)+$`` against 30,000 a's and a '!' takes Python's re for ever; the answer is checked in
    linear time (the verdict: it does not match), eight such calls at once, while an ordinary call answers."""
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": "^(a+)+$"}}}
    TaskProfileFactory.create(
        name="evil",
        verifier={"kind": "json_schema", "schema": schema},
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
    )
    answer = json.dumps({"v": "a" * 30_000 + "!"})
    stub.responder = lambda body: _reply(answer if body["messages"][-1]["content"] != "hi" else "ok")
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": "give v"}],
        "metadata": {"task": "evil"},
        "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": schema}},
    }
    results = during(lambda: _send(gateway_url, api_key.raw, "/v1/chat/completions", body), gateway_url,
                     api_key.raw, copies=8)  # fmt: skip
    for response in results:
        assert response.status_code == 200, response.text
        assert response.headers["x-skillgate-verdict"] == "fail"  # the teacher gave the same answer


def _reply(content: str) -> Any:
    from bench.support.openai_stub import Reply

    return Reply(content=content)


def test_a_schema_from_outside_checks_the_agents_arguments_and_fetches_nothing():
    """An MCP server's tool schema (third-party data) validates the arguments of the agent's and the
    gateway's calls with the same rules as a caller's: a remote ``$ref`` refuses every value unread, a
    backtracking pattern runs in linear time."""
    import time

    from diagnostics.toolsets.base import validation_error

    with listener() as attacker:
        url = f"http://127.0.0.1:{attacker.port}/schema.json"
        problem = validation_error({"type": "object", "properties": {"a": {"$ref": url}}}, {"a": 1})
        assert problem and "$ref" in problem and attacker.requests == []
    started = time.perf_counter()
    problem = validation_error({"properties": {"v": {"pattern": "^(a+)+$"}}}, {"v": "a" * 30_000 + "!"})
    assert problem and "does not match" in problem and time.perf_counter() - started < 1
    assert validation_error({"properties": {"v": {"type": "string"}}}, {"v": "ok"}) is None
