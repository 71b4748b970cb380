"""Large bodies of wide schemas leave the serving process live (issue 37, class 1; round three, part two).

After the schemas of a body went to verifier workers (test_wide_schemas.py), three 464 KB bodies of
eight 1,000-property schemas arriving together still held ``GET /v1/models`` for 1.1-1.6 s on the shared
development machine. What was left under the serving process's GIL, per body: the body parsed twice (once
to find its schemas, once by the protocol's parser), and each new schema parsed a third time only to be
serialized again into the worker's task; each parse allocates the body's tens of thousands of containers
again, and the cyclic GC walks them (one collection took 0.13 s). Now a body is parsed once (the vetting's
parse is handed to the protocol's parser) and a schema's own bytes go into the worker's frame
(routing/verifiers/vetting.py). Through the running server, on all three protocols: three such bodies at
once leave ``GET /v1/models`` answering within a second, each body is parsed once, and each call reaches
the upstream once. The upstream body shares the caller's schemas instead of copying them (pydantic's
``model_dump`` copied every container: 10-20 ms for such a body), and is otherwise the dump it was.
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from routing import json_body, schemas
from routing.protocol import GATEWAY_ONLY, ChatRequest
from tests.support.liveness import models_keep_answering

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
BODIES = 3


def _wide(variant: str, width: int = 1000) -> dict[str, Any]:
    branch = {"allOf": [{"type": "integer"}, {"minimum": 1}]}
    return {"type": "object", "description": variant, "properties": {f"p{j}": branch for j in range(width)}}


def _body(path: str, variant: str) -> bytes:
    """Eight tools of 1,000 properties of two ``allOf`` branches each (464 KB), new to the server."""
    schemas = [_wide(f"{variant}-{i}") for i in range(8)]
    if path == "/v1/chat/completions":
        functions = [{"name": f"f{i}", "parameters": s} for i, s in enumerate(schemas)]
        tools: list[dict[str, Any]] = [{"type": "function", "function": f} for f in functions]
        body: dict[str, Any] = {"messages": HELLO, "max_tokens": 5}
    elif path == "/v1/messages":
        tools = [{"name": f"f{i}", "input_schema": s} for i, s in enumerate(schemas)]
        body = {"messages": HELLO, "max_tokens": 5}
    else:
        tools = [{"type": "function", "name": f"f{i}", "parameters": s} for i, s in enumerate(schemas)]
        body = {"input": "hi", "max_output_tokens": 5}
    return json.dumps({"model": "auto", **body, "tools": tools}).encode()  # serialized before the clock


def _post(url: str, key: str, path: str, body: bytes) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "anthropic-version": "2023-06-01"}
    return httpx.post(url + path, content=body, headers=headers, timeout=60)


@pytest.fixture
def parses(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """The size of each body the serving process parses (``loads_request`` -> ``loads_bounded``)."""
    sizes: list[int] = []
    real = json_body.loads_bounded

    def counting(raw: Any, **limits: Any) -> Any:
        sizes.append(len(raw))
        return real(raw, **limits)

    monkeypatch.setattr(json_body, "loads_bounded", counting)
    return sizes


@pytest.fixture
def counted(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """Each time the serving process counts a schema's cost itself."""
    calls: list[int] = []
    real = schemas.schema_cost

    def counting(schema: dict[str, Any]) -> tuple[int, int, int]:
        calls.append(1)
        return real(schema)

    monkeypatch.setattr(schemas, "schema_cost", counting)
    return calls


PATHS = ["/v1/chat/completions", "/v1/messages", "/v1/responses"]


@pytest.mark.parametrize("path", PATHS)
def test_large_schema_bodies_arriving_together_stall_no_one_and_are_parsed_once(
    gateway_url, backends, api_key, stub, parses, path
):
    bodies = [_body(path, f"{path}-{n}-{uuid.uuid4()}") for n in range(BODIES)]
    assert all(len(body) > 450_000 for body in bodies)
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(BODIES) as threads:
        responses = list(threads.map(lambda body: _post(gateway_url, api_key.raw, path, body), bodies))
    assert [r.status_code for r in responses] == [200] * BODIES, responses[0].text
    assert sorted(size for size in parses if size > 450_000) == sorted(map(len, bodies))  # once each
    assert len(stub.requests) == BODIES


def _escaped(raw: bytes, *keys: str) -> bytes:
    """``raw`` with each of ``keys`` spelled with a JSON escape (``"\\u0070arameters"``): the same JSON."""
    for key in keys:
        raw = raw.replace(f'"{key}"'.encode(), f'"\\u{ord(key[0]):04x}{key[1:]}"'.encode())
    return raw


@pytest.mark.parametrize("path", PATHS)
def test_schema_keys_spelled_with_escapes_are_still_costed_in_a_worker(
    gateway_url, backends, api_key, stub, counted, path
):
    """The schema finder looked for ``"parameters"``, ``"input_schema"``, ``"schema"`` in the body's
    bytes: spelled ``"\\u0070arameters"`` (the same key to every JSON parser) a 464 KB body of tools went
    past it, and the serving process counted its eight wide schemas itself (seconds, under the GIL)."""
    body = _escaped(_body(path, f"escaped-{uuid.uuid4()}"), "parameters", "input_schema")
    assert b'"parameters"' not in body and b'"input_schema"' not in body
    with models_keep_answering(gateway_url, api_key.raw):
        response = _post(gateway_url, api_key.raw, path, body)
    assert response.status_code == 200, response.text
    assert counted == [] and len(stub.requests) == 1


def _ring(links: int) -> dict[str, Any]:
    """A small ring of references, doubling at each level: refused by its count."""
    defs: dict[str, Any] = {
        f"d{i}": {
            "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}},
            "allOf": [{"$ref": f"#/$defs/d{i + 1}"}],
        }
        for i in range(links)
    }
    defs[f"d{links}"] = {"type": "array", "items": {"$ref": "#"}, "description": str(uuid.uuid4())}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def test_a_small_ring_whose_references_are_spelled_with_escapes_is_counted_in_a_worker(
    gateway_url, backends, api_key, stub, counted
):
    """A body under 2 KiB with no ``"$ref"`` in its bytes was counted by the parse, in the serving
    process: ``"\\u0024ref"`` hid a ring that costs 15-20 ms to count, on every call (a refusal is not
    kept), before the key's rate limit is even checked."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": _ring(12)}}]
    raw = json.dumps({"model": "auto", "messages": HELLO, "tools": tools}, separators=(",", ":")).encode()
    body = _escaped(raw, "$ref")
    assert len(body) <= 2048 and b'"$ref"' not in body
    response = _post(gateway_url, api_key.raw, "/v1/chat/completions", body)
    assert response.status_code == 400, response.text
    assert "100000" in response.json()["error"]["message"]
    assert counted == [] and stub.requests == []


MARK = {"type": "ephemeral"}
UPSTREAM_CASES = {
    "plain": {"model": "auto", "messages": HELLO, "max_tokens": 5},
    "every shared field": {
        "model": "auto",
        "messages": [
            {"role": "system", "content": "s"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]},
        ],
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": _wide("t", 3)}},
            {
                "type": "function",
                "function": {"name": "g", "strict": True},
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "functions": [{"name": "h", "description": "d", "parameters": {"type": "object"}}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": _wide("r", 2)}},
        "temperature": 0.5,
        "stop": ["x"],
        "stream": True,
        "stream_options": {"include_usage": True},
        "metadata": {"task": "t"},
        "max_completion_tokens": 7,
        "seed": 3,
    },
}


@pytest.mark.parametrize("case", sorted(UPSTREAM_CASES))
def test_the_upstream_body_is_the_requests_dump_with_its_schemas_shared(case):
    request = ChatRequest.model_validate(UPSTREAM_CASES[case])
    body = request.upstream_body(max_tokens=20)
    dumped = request.model_dump(exclude_none=True, exclude=set(GATEWAY_ONLY))
    dumped.pop("max_completion_tokens", None)
    assert json.dumps(body) == json.dumps({**dumped, "max_tokens": 20})  # the same keys, in the same order
    for sent, tool in zip(body.get("tools", []), request.tools or [], strict=True):
        assert sent["function"].get("parameters") is tool.function.parameters  # shared, not copied
