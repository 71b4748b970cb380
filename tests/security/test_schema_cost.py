"""A caller's schema is bounded by its cost before it is accepted (issue 37; routing/schemas.py).

The attacks: 1-3 KB of ``$defs`` that refer to each other twice per level, through each applicator
(``$ref``, ``$dynamicRef``, ``allOf``, ``if``/``then``/``else``, ``dependentSchemas``, ``anyOf``);
recursion that doubles per level of the *instance*; ``anyOf``/``oneOf`` fan-out; a reference loop that
never descends. Through the running server each is a 400 in the caller's protocol naming the limit,
in every place a schema arrives, nothing reaches the provider, and an ordinary call answers meanwhile.
Legitimate recursion (a tree, a binary tree, an expression grammar) is accepted and still judges.
"""

from __future__ import annotations

import json
import time
from typing import Any

import orjson
import pytest

from bench.support.openai_stub import Reply
from routing.json_body import ANSWER_MAX_DEPTH
from routing.models import Invocation, TaskProfile
from routing.schemas import (
    MAX_COUNTED_PAIRS,
    MAX_FANOUT,
    MAX_INSTANCE_DEPTH,
    MAX_SCHEMA_COST,
    schema_cost,
    schema_problem,
)
from tests.factories import TaskProfileFactory
from tests.security.test_caller_schemas import PLACES, _attack, _send

LEVELS = 30


def _doubling(via: str, levels: int = LEVELS) -> dict[str, Any]:
    """``d0`` .. ``d<levels>``: each level refers to the next twice, through ``via``."""
    defs: dict[str, Any] = {}
    for i in range(levels):
        ref = {"$ref": f"#/$defs/d{i + 1}"}
        defs[f"d{i}"] = {
            "$ref": {"allOf": [ref, ref]},
            "$dynamicRef": {"allOf": [{"$dynamicRef": f"#/$defs/d{i + 1}"}] * 2},
            "allOf": {"allOf": [ref, {"allOf": [ref]}]},
            "if/then/else": {"if": ref, "then": ref, "else": ref},
            "dependentSchemas": {"dependentSchemas": {"a": ref, "b": ref}},
            "anyOf": {"anyOf": [ref, ref]},
            "oneOf+not": {"oneOf": [ref, {"not": ref}]},
        }[via]
    defs[f"d{levels}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


VIAS = ["$ref", "$dynamicRef", "allOf", "if/then/else", "dependentSchemas", "anyOf", "oneOf+not"]


@pytest.mark.parametrize("via", VIAS)
def test_defs_doubling_per_level_are_refused_at_the_edge_naming_the_limit(
    gateway_url, backends, api_key, stub, via
):
    schema = _doubling(via)
    assert len(orjson.dumps(schema)) < 4096  # a few KB: the size bounds let it through
    _attack(gateway_url, api_key, stub, "chat.response_format", schema, "limit", str(MAX_SCHEMA_COST))


@pytest.mark.parametrize("place", PLACES)
def test_every_entry_point_counts_the_cost(gateway_url, backends, api_key, stub, place):
    _attack(gateway_url, api_key, stub, place, _doubling("allOf"), "limit", str(MAX_SCHEMA_COST))


def test_recursion_that_doubles_per_instance_level_is_refused(gateway_url, backends, api_key, stub):
    """Each level's cost is finite but two branches descend into the same child: 2^depth checks on an
    answer nested as deep as the answer parser allows."""
    node = {"properties": {"x": {"$ref": "#/$defs/a"}}}
    schema = {"$defs": {"a": {"type": "object", "allOf": [node, node]}}, "$ref": "#/$defs/a"}
    _attack(gateway_url, api_key, stub, "chat.tools", schema, "along one path", str(MAX_SCHEMA_COST))


def test_any_of_fan_out_is_refused(gateway_url, backends, api_key, stub):
    """Six alternatives per level, five levels: 7,776 alternatives along one path, few subschemas."""
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 6} for i in range(5)}
    schema = {"$defs": {**defs, "d5": {"type": "integer"}}, "$ref": "#/$defs/d0"}
    assert schema_cost(schema)[0] <= MAX_SCHEMA_COST  # within the expansion budget
    _attack(gateway_url, api_key, stub, "responses.text.format", schema, "fan-out", str(MAX_FANOUT))


def test_a_reference_loop_that_never_descends_is_refused(gateway_url, backends, api_key, stub):
    schema = {
        "$defs": {
            "a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/b"}]},
            "b": {"not": {"$ref": "#/$defs/a"}},
        }
    }
    _attack(gateway_url, api_key, stub, "messages.output_config", {**schema, "$ref": "#/$defs/a"}, "cycle")


TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["name"],
        }
    },
    "$ref": "#/$defs/node",
}
BINARY = {
    "type": "object",
    "properties": {"v": {"type": "integer"}, "left": {"$ref": "#"}, "right": {"$ref": "#"}},
}
GRAMMAR = {
    "$defs": {
        "expr": {
            "anyOf": [
                {"type": "number"},
                {
                    "type": "object",
                    "properties": {
                        "op": {"enum": ["+", "*"]},
                        "args": {"type": "array", "items": {"$ref": "#/$defs/expr"}},
                    },
                    "required": ["op", "args"],
                },
            ]
        }
    },
    "$ref": "#/$defs/expr",
}


def _deep_tree(depth: int) -> dict[str, Any]:
    tree: dict[str, Any] = {"name": "leaf"}
    for i in range(depth):
        tree = {"name": f"n{i}", "children": [tree]}
    return tree


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        (TREE, _deep_tree(40), {"name": "a", "children": [{"children": []}]}),
        (BINARY, {"v": 1, "left": {"v": 2, "right": {"v": 3}}}, {"v": 1, "left": {"v": "x"}}),
        (
            GRAMMAR,
            {"op": "+", "args": [1, {"op": "*", "args": [2, 3]}]},
            {"op": "+", "args": [1, {"op": "-", "args": []}]},
        ),
    ],
    ids=["tree", "binary-tree", "expression-grammar"],
)
def test_legitimate_recursion_is_accepted_and_judges(gateway_url, backends, api_key, stub, schema, good, bad):
    assert schema_problem(schema) is None
    TaskProfileFactory.create(
        name="recursive",
        verifier={"kind": "json_schema", "schema": schema},
        policy=TaskProfile.Policy.ALWAYS_TEACHER,
    )
    for answer, verdict in ((good, "pass"), (bad, "fail")):
        stub.responder = lambda body, answer=answer: Reply(content=json.dumps(answer))
        body = {
            "model": "auto",
            "messages": [{"role": "user", "content": "x"}],
            "metadata": {"task": "recursive"},
        }
        response = _send(gateway_url, api_key.raw, "/v1/chat/completions", body)
        assert response.status_code == 200, response.text
        assert response.headers["x-skillgate-verdict"] == verdict
    assert Invocation.objects.count() == 2


def test_the_instance_depth_of_the_cost_rule_is_the_answer_parsers():
    assert MAX_INSTANCE_DEPTH == ANSWER_MAX_DEPTH


def test_counting_is_fast_even_for_the_largest_recursive_schema():
    """A 64 KB ring of references through the root: the count is bounded by its own budget."""
    defs = {
        f"d{i}": {
            "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}},
            "allOf": [{"$ref": f"#/$defs/d{i + 1}"}],
        }
        for i in range(740)
    }
    defs["d740"] = {"type": "array", "items": {"$ref": "#"}}
    schema = {"$defs": defs, "$ref": "#/$defs/d0"}
    assert len(orjson.dumps(schema)) <= 64 * 1024
    started = time.thread_time()  # this thread's CPU: what counting costs, whatever else the machine runs
    problem = schema_problem(schema)
    took = time.thread_time() - started
    assert problem is not None and (str(MAX_COUNTED_PAIRS) in problem or str(MAX_SCHEMA_COST) in problem)
    assert took < 1.0, f"counting took {took:.2f}s"
