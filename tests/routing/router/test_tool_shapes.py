"""The meta features' per-tool cache (routing/router/learning/tool_shapes.py) gives exactly the shapes and
words of walking every tool on every call."""

from __future__ import annotations

from routing.router.learning.calls import CallInput, content_words, schema_shape, tool_text
from routing.router.learning.features import _tool_words, meta_values
from routing.router.learning.tool_shapes import tool_json, tool_shape, tools_shape


def _tool(name: str, params: object) -> dict:
    return {
        "type": "function",
        "function": {"name": name, "description": f"does {name}", "parameters": params},
    }


HOSTILE_TOOLS = [
    _tool(
        "get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    ),
    _tool(
        "book",
        {
            "type": "object",
            "required": ["when", "who", "rooms"],
            "properties": {
                "when": {"type": ["string", "null"], "description": "ISO date"},
                "who": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "int"}}}},
                "rooms": {"enum": [1, 2, 3]},
                "big": {"type": "integer", "maximum": 2**80},  # beyond orjson's 64 bits
                "odd": {"type": "string", "description": "\ud800 lone surrogate, ünïcode"},
            },
        },
    ),
    _tool("nothing", None),
    {"type": "function", "function": "not a dict"},
    _tool(
        "deep",
        {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"items": {}}}}}},
    ),
]
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"schema": {"type": "object", "required": ["x"], "properties": {"x": {"type": "number"}}}},
}


def _check(tools: list, response_format: dict | None) -> None:
    texts = [tool_json(t) for t in tools]
    assert tools_shape(texts, response_format) == schema_shape(tools, response_format)
    for tool, text in zip(tools, texts, strict=True):
        assert tool_shape(text) == schema_shape([tool], None)
        assert _tool_words(text) == content_words(tool_text(tool))


def test_cached_shapes_and_words_equal_the_walk():
    for n in range(len(HOSTILE_TOOLS) + 1):
        _check(HOSTILE_TOOLS[:n], None)
        _check(HOSTILE_TOOLS[:n], RESPONSE_FORMAT)
    _check(HOSTILE_TOOLS * 3, RESPONSE_FORMAT)  # repeated tools: each counted each time


def test_cached_shapes_leave_the_records_meta_features_as_they_were(mixed_test):
    for record in mixed_test[:200]:
        call = CallInput.from_record(record)
        _check(list(call.tools), call.response_format)
        assert meta_values(call) == meta_values(call)  # a warm cache answers as the cold one did


def test_a_shared_shape_is_not_changed_by_summing():
    text = tool_json(HOSTILE_TOOLS[1])
    before = schema_shape([HOSTILE_TOOLS[1]], None)
    tools_shape([text, text], RESPONSE_FORMAT)
    assert tool_shape(text) == before
