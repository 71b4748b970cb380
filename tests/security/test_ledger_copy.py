"""The ledger's copy of a large request costs the serving process nothing (issue 37, round three).

The request the verifiers and the router read and the ledger stores (``CallPlan.request_dict``) was
pydantic's ``model_dump`` of the parsed request: a copy of every container of the caller's tools, 10-20 ms
of the serving process for a 464 KB body of schemas, before the call was sent. It now shares the
caller's schemas as the upstream body does (``ChatRequest.dump``), and the row still records the whole
request: the same value as before, checked here on every field shape and through the running server.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from routing.call.plans import plan_call
from routing.ledger import writer
from routing.models import Invocation
from routing.protocol import ChatRequest, parse_chat_request
from tests.factories import TaskProfileFactory
from tests.support.liveness import models_keep_answering
from tests.support.wait import wait_until

HELLO = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": SCHEMA}}

CASES: dict[str, dict[str, Any]] = {
    "plain": {"model": "auto", "messages": HELLO, "temperature": 0.2, "max_tokens": 5},
    "tools": {"model": "auto", "messages": HELLO, "tools": [TOOL], "tool_choice": "auto"},
    "tool with cache mark": {
        "model": "auto",
        "messages": HELLO,
        "tools": [{**TOOL, "cache_control": {"type": "ephemeral"}}],
    },
    "functions": {"model": "auto", "messages": HELLO, "functions": [TOOL["function"]]},
    "response_format": {
        "model": "auto",
        "messages": HELLO,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}},
        "metadata": {"task": "t"},
        "stream": True,
        "stream_options": {"include_usage": True},
    },
}


def wide_body() -> bytes:
    """Eight tools of 1,000 properties of two ``allOf`` branches each: 464 KB."""
    branch = {"allOf": [{"type": "integer"}, {"minimum": 1}]}
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"f{i}",
                "parameters": {"type": "object", "properties": {f"p{j}": branch for j in range(1000)}},
            },
        }
        for i in range(8)
    ]
    return json.dumps({"model": "auto", "messages": HELLO, "max_tokens": 5, "tools": tools}).encode()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_stored_request_is_the_requests_whole_dump(case):
    request = ChatRequest.model_validate(CASES[case])
    dumped = request.dump()
    assert dumped == request.model_dump(exclude_none=True)
    assert list(dumped) == list(request.model_dump(exclude_none=True))  # in the same order


@pytest.mark.django_db
def test_the_plans_request_shares_the_callers_schemas_instead_of_copying_them(backends):
    raw = wide_body()
    request = parse_chat_request(raw, json.loads(raw))
    plan = plan_call(profile=TaskProfileFactory.create(name="plain"), request=request)
    assert request.tools is not None
    for stored, parsed in zip(plan.request_dict["tools"], request.tools, strict=True):
        assert stored["function"]["parameters"] is parsed.function.parameters  # shared: no copy
    assert plan.request_dict == request.model_dump(exclude_none=True)


@pytest.mark.django_db(transaction=True)
def test_large_bodies_are_recorded_whole_while_others_are_answered(gateway_url, backends, api_key, stub):
    raw = wide_body()
    headers = {"Authorization": f"Bearer {api_key.raw}", "Content-Type": "application/json"}
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(3) as pool:
        answers = list(
            pool.map(
                lambda _: httpx.post(
                    f"{gateway_url}/v1/chat/completions", content=raw, headers=headers, timeout=60
                ),
                range(3),
            )
        )
    assert [answer.status_code for answer in answers] == [200, 200, 200], answers[0].text[:300]
    wait_until(lambda: Invocation.objects.count() == 3, timeout=20, what="the three rows")
    writer.drain()
    expected = json.loads(
        json.dumps(ChatRequest.model_validate(json.loads(raw)).model_dump(exclude_none=True))
    )
    for row in Invocation.objects.all():
        assert row.request == expected  # the record is whole
