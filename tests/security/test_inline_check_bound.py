"""Only a check whose cost is tiny runs in the serving process (issue 37, class 1; h37's probes).

``inline_schema`` let every schema of up to 2 KiB without patterns, formats, references or
alternatives run inline on an answer of up to 4 KiB. Within those bounds the cost still varied by two
orders of magnitude: 290 nested ``not`` on 2,000 array items, or an enum of 300 values on each item,
took 12-40 ms of the serving process's CPU per call, and ``multipleOf: 1e-300`` on one 4,000-digit
integer 14 ms (big-number division). Now the schema's values times the answer's possible elements
must stay within ``INLINE_CHECKS``, and ``multipleOf`` always goes to a worker. Each probe shape is
measured at every size it is still accepted inline: none costs more than a few milliseconds of CPU.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from bench.support.openai_stub import Reply
from routing.json_body import loads_answer
from routing.models import TaskProfile
from routing.schemas import schema_errors
from routing.verifiers import pool
from routing.verifiers.json_schema import INLINE_TEXT_CHARS, inline_schema
from tests.factories import TaskProfileFactory
from tests.security.test_schema_error_cost import _send


def _nested_not(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"minimum": 1} if levels % 2 else {}
    for _ in range(levels):
        schema = {"not": schema}
    return schema


def _shapes(k: int, n: int) -> dict[str, tuple[dict[str, Any], str]]:
    zeros = json.dumps([0] * n, separators=(",", ":"))
    return {
        "nested not": ({"items": _nested_not(k)}, zeros),
        "enum": ({"items": {"enum": list(range(1, k + 1))}}, zeros),
        "allOf": ({"items": {"allOf": [{"minimum": -1}] * k}}, zeros),
        "contains": ({"allOf": [{"contains": {"const": 1}}] * k}, zeros),
        "unevaluated": (
            {"items": {"allOf": [{"properties": {"a": {}}}] * k, "unevaluatedProperties": False}},
            json.dumps([{"a": 1}] * (n // 8)),
        ),
    }


def test_every_schema_accepted_inline_costs_at_most_a_few_milliseconds():
    measured = 0
    for k in (1, 10, 50, 100, 290):
        for n in (50, 200, 1000, 2000):
            for name, (schema, answer) in _shapes(k, n).items():
                if len(answer) > INLINE_TEXT_CHARS or not inline_schema(schema, len(answer)):
                    continue
                instance = loads_answer(answer)
                started = time.thread_time()
                schema_errors(schema, instance)
                took = time.thread_time() - started
                measured += 1
                assert took < 0.005, f"{name} k={k} n={n}: {took * 1000:.1f} ms inline"
    assert measured > 20


def test_the_probes_that_cost_tens_of_milliseconds_go_to_a_worker():
    for name, (schema, answer) in _shapes(290, 2000).items():
        assert len(answer) <= INLINE_TEXT_CHARS
        assert not inline_schema(schema, len(answer)), name
    assert not inline_schema({"multipleOf": 1e-300}, 4001)
    assert inline_schema({"type": "object", "properties": {"a": {"type": "integer"}}}, 4000)  # still cheap


@pytest.mark.django_db(transaction=True)
def test_a_big_number_division_is_judged_in_a_worker(gateway_url, backends, api_key, stub):
    """A 4,000-digit integer against ``multipleOf: 1e-300``: the worker judges it, correctly."""
    TaskProfileFactory.create(name="plain", policy=TaskProfile.Policy.ALWAYS_TEACHER)
    stub.responder = lambda body: Reply(content="1" + "0" * 4000)
    schema = {"type": "integer", "multipleOf": 1e-300}
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    }
    sent = pool.tasks_sent()
    response = _send(gateway_url, api_key.raw, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert response.headers["x-skillgate-verdict"] == "pass"
    assert pool.tasks_sent() == sent + 1
