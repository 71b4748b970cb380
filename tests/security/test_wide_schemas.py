"""Wide schemas without references are costed in a worker too (issue 37, class 1; round-three variant).

Round two sent only schemas with references to the workers: one without any was "at most its own
size" and counted and compiled in the serving process. But its own size is 5,000 objects, and a body
holds many: eight tools of 1,000 properties of two ``allOf`` branches (464 KB, under every body bound)
took 4.2 s of the serving process's CPU to parse, all of it under the GIL. Now every new schema of a
body goes to a worker unless together they are tiny (routing/verifiers/vetting.py), the parse takes
the worker's word, and a body of more than ``MAX_SCHEMAS`` schemas is a 400. Through the running
server: the serving process never counts such a schema, requests of them arriving together leave
``GET /v1/models`` answering within a second, and a call with one small tool stays in-process.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from routing import schemas
from routing.models import Invocation
from routing.verifiers import pool, vetting
from tests.security.test_caller_schemas import _send
from tests.support.liveness import models_keep_answering

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]


def _wide(variant: str, width: int = 1000, branch: Any = None) -> dict[str, Any]:
    branch = branch or {"allOf": [{"type": "integer"}, {"minimum": 1}]}
    return {"type": "object", "description": variant, "properties": {f"p{j}": branch for j in range(width)}}


def _tools(variant: str, count: int = 8, width: int = 1000) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": f"f{i}", "parameters": _wide(f"{variant}-{i}", width)}}
        for i in range(count)
    ]


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


def test_wide_schemas_arriving_together_are_counted_in_workers_and_stall_no_one(
    gateway_url, backends, api_key, stub, counted
):
    bodies = [
        {"model": "auto", "messages": HELLO, "max_tokens": 5, "tools": _tools(f"wide-{n}", count=4)}
        for n in range(2)
    ]
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(2) as threads:
        responses = list(
            threads.map(lambda b: _send(gateway_url, api_key.raw, "/v1/chat/completions", b), bodies)
        )
    assert [r.status_code for r in responses] == [200] * 2, responses[0].text
    assert counted == []  # the serving process never counted one
    assert len(stub.requests) == 2


def test_an_unusable_wide_schema_is_still_refused_on_the_workers_word(
    gateway_url, backends, api_key, stub, counted
):
    schema = _wide("too-many-objects", width=1700, branch={"allOf": [{}, {}]})  # 5,102 objects, 42 KB
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    for path, body in (
        ("/v1/chat/completions", {"model": "auto", "messages": HELLO, "tools": tools}),
        (
            "/v1/messages",
            {
                "model": "auto",
                "max_tokens": 5,
                "messages": HELLO,
                "tools": [{"name": "f", "input_schema": tools[0]["function"]["parameters"]}],
            },
        ),
    ):
        response = _send(gateway_url, api_key.raw, path, body)
        assert response.status_code == 400, response.text
        assert "objects" in response.text
    assert counted == [] and stub.requests == [] and not Invocation.objects.exists()


def test_a_body_of_too_many_schemas_is_a_400_before_any_is_counted(gateway_url, backends, api_key, stub):
    sent = pool.tasks_sent()
    tools = _tools("many", count=vetting.MAX_SCHEMAS + 1, width=1)
    response = _send(
        gateway_url, api_key.raw, "/v1/chat/completions", {"model": "auto", "messages": HELLO, "tools": tools}
    )
    assert response.status_code == 400, response.text
    assert str(vetting.MAX_SCHEMAS) in response.json()["error"]["message"]
    assert pool.tasks_sent() == sent and stub.requests == []


def test_a_call_with_one_small_tool_stays_in_the_serving_process(gateway_url, backends, api_key, stub):
    sent = pool.tasks_sent()
    body = {"model": "auto", "messages": HELLO, "max_tokens": 5, "tools": _tools("small", count=1, width=3)}
    response = _send(gateway_url, api_key.raw, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert pool.tasks_sent() == sent  # no worker round trip for a tiny schema
