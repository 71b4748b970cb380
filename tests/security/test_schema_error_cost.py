"""A failed schema check costs one error, not one per failing keyword and key (issue 37, class 1;
round three, h37's probes).

The probe: a 93-byte response schema ``{"propertyNames": {six keywords that all fail}}`` and a 4 KiB
answer object of 545 keys. Small and without patterns, references or alternatives, so the check runs
inline in the serving process, as it should for a tiny check. But the validator (jsonschema-rs's
``iter_errors``) built every error eagerly, each with a Python copy of its instance, and the verdict
counted them all: 3,270 copies of the whole object, 3.6 s under the GIL for one call on the shared
development machine. A plain ``llm`` key sends the schema (its response format judges a profile without
a verifier; a ``tool_args`` profile judges tool arguments against the caller's own parameters), and
asks the model to answer with such an object. Now the check asks ``is_valid`` and builds only the
first error (``routing.schemas.schema_errors``): about 0.5 ms.

Through the running server, on each entry point: the answer fails its check, ``GET /v1/models``
answers within a second while four such calls run, and each call has its one row.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.models import Invocation, TaskProfile
from routing.schemas import schema_errors
from routing.verifiers.json_schema import INLINE_TEXT_CHARS, inline_schema
from tests.factories import TaskProfileFactory
from tests.support.liveness import models_keep_answering
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FAILING = {"maxLength": 0, "minLength": 9, "enum": [1], "const": 1, "type": "number", "not": {}}
NAMES = {"type": "object", "propertyNames": FAILING}  # every key fails six keywords
EVERY_ITEM = {
    "type": "array",
    "items": {"type": "string", **{k: v for k, v in FAILING.items() if k != "type"}},
}


def _object_answer() -> str:
    """The widest object that still counts as a short answer: 545 keys in 4 KiB."""
    text = json.dumps({f"{i:x}": 0 for i in range(600)}, separators=(",", ":"))
    while len(text) > INLINE_TEXT_CHARS:
        text = text[: text.rfind(",")] + "}"
    return text


def _array_answer(chars: int = INLINE_TEXT_CHARS) -> str:
    text = json.dumps([0] * 2100, separators=(",", ":"))[:chars]
    return text[: text.rfind(",")] + "]"


def test_the_probe_is_a_tiny_inline_check_and_costs_one_error():
    """What makes it an attack: it is small enough to run in the serving process."""
    for schema, answer in ((NAMES, _object_answer()), (EVERY_ITEM, _array_answer())):
        assert inline_schema(schema) and len(answer) <= INLINE_TEXT_CHARS
        started = time.thread_time()
        reason = schema_errors(schema, json.loads(answer))
        took = time.thread_time() - started
        assert reason is not None and reason.startswith("at $")
        assert took < 0.05, f"one failed check took {took:.2f}s of CPU"


def _bodies(schema: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        "chat": (
            "/v1/chat/completions",
            {"model": "auto", "messages": [{"role": "user", "content": "x"}],
             "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}},
        ),
        "responses": (
            "/v1/responses",
            {"model": "auto", "input": "x",
             "text": {"format": {"type": "json_schema", "name": "x", "schema": schema}}},
        ),
        "messages": (
            "/v1/messages",
            {"model": "auto", "max_tokens": 50, "messages": [{"role": "user", "content": "x"}],
             "output_config": {"format": {"type": "json_schema", "schema": schema}}},
        ),
    }  # fmt: skip


def _send(gateway_url: str, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "X-Skillgate-Task": "plain"}
    return httpx.post(gateway_url + path, json=body, headers=headers, timeout=60)


def _flood(gateway_url: str, key: str, path: str, body: dict[str, Any], count: int = 4) -> list[Any]:
    with models_keep_answering(gateway_url, key), ThreadPoolExecutor(count) as threads:
        return list(threads.map(lambda _: _send(gateway_url, key, path, body), range(count)))


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_response_schema_failing_every_key_stalls_no_one(gateway_url, backends, api_key, stub, api):
    TaskProfileFactory.create(name="plain", policy=TaskProfile.Policy.ALWAYS_TEACHER)
    answer = _object_answer()
    stub.responder = lambda body: Reply(content=answer)
    path, body = _bodies(NAMES)[api]
    responses = _flood(gateway_url, api_key.raw, path, body)
    assert [r.status_code for r in responses] == [200] * 4, responses[0].text
    rows = wait_until(lambda: Invocation.objects.count() == 4 or None, timeout=20, what="4 rows")
    assert rows
    assert set(Invocation.objects.values_list("verdict", flat=True)) == {"fail"}


def test_tool_arguments_failing_every_item_stall_no_one(gateway_url, backends, api_key, stub):
    """A ``tool_args`` profile judges the model's arguments against the caller's own parameters."""
    TaskProfileFactory.create(
        name="plain", verifier={"kind": "tool_args"}, policy=TaskProfile.Policy.ALWAYS_TEACHER
    )
    arguments = '{"a":' + _array_answer(INLINE_TEXT_CHARS - 6) + "}"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    stub.responder = lambda body: Reply(content=None, tool_calls=[call])
    parameters = {"type": "object", "properties": {"a": EVERY_ITEM}}
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
    }
    responses = _flood(gateway_url, api_key.raw, "/v1/chat/completions", body)
    assert [r.status_code for r in responses] == [200] * 4, responses[0].text
    assert [r.headers["x-skillgate-verdict"] for r in responses] == ["fail"] * 4
