"""The meta features' per-tool cache (routing/router/learning/tool_shapes.py) gives exactly the shapes and
words of walking every tool on every call."""

from __future__ import annotations

from routing.router.learning.calls import (
    HEAD_CHARS,
    CallInput,
    content_text,
    content_words,
    render_tool,
    response_schema,
    schema_outline,
    schema_shape,
    tool_text,
)
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


def _head_walking_every_tool(call: CallInput) -> str:
    """The head as it was rendered before tool lines were cached: every schema outlined on every call."""
    system = [
        content_text(m.get("content")) for m in call.messages if m.get("role") in ("system", "developer")
    ]
    head = "\n".join(system)
    if call.tools:
        head += "\ntools: " + "; ".join(render_tool(t) for t in call.tools)
    response = response_schema(call.response_format)
    if response is not None:
        head += "\nresponse schema: " + schema_outline(response)
    return head[:HEAD_CHARS]


def test_cached_tool_lines_render_the_head_of_walking_every_tool(mixed_test):
    tools = HOSTILE_TOOLS[:3] + HOSTILE_TOOLS[4:]
    call = CallInput(messages=[{"role": "system", "content": "be brief"}], tools=tools)
    assert call.head == _head_walking_every_tool(call)
    assert "book{when, who[{n}], rooms, big, odd}" in call.head  # the caller's order of properties
    # the same tool with its properties in another order is another line, not the cached one
    swapped = _tool("book", {"type": "object", "properties": {"odd": {}, "when": {}}})
    assert "book{odd, when}" in CallInput(messages=[], tools=[swapped]).head
    huge = _tool("huge", {"type": "object", "properties": {f"p{i}": {} for i in range(2000)}})
    long_call = CallInput(messages=[{"role": "system", "content": "x" * 100}], tools=[huge, huge])
    assert long_call.head == _head_walking_every_tool(long_call) and len(long_call.head) == HEAD_CHARS
    for record in mixed_test[:200]:
        call = CallInput.from_record(record)
        assert call.head == _head_walking_every_tool(call)
