"""A BFCL item as an OpenAI chat request, and an answer decoded back into BFCL's call form.

The request carries the function docs as OpenAI ``tools`` (JSON Schema types, names without dots, as
OpenAI requires) and, for students served without a tool-call parser, the same docs and the answer
format in a system message (BFCL's own prompting mode does the same). An answer's calls are read from
its ``tool_calls`` and, failing those, from Hermes ``<tool_call>{"name", "arguments"}</tool_call>``
blocks or a bare ``{"name", "arguments"}`` JSON object (or a list of them) in its text; names are
mapped back to BFCL's.
"""

from __future__ import annotations

import json
import re
from typing import Any

from bench.bfcl.checker import Call
from bench.bfcl.data import Item
from routing.json_body import loads_answer
from routing.verifiers.tool_text import TextCallError, written_calls

TYPES = {"dict": "object", "float": "number", "tuple": "array", "integer": "integer"}
SYSTEM = (
    "You can call these functions. If one or more of them answer the request, reply only with one "
    '<tool_call>{{"name": <function name>, "arguments": <arguments object>}}</tool_call> block per call. '
    "If none of them applies, say so in plain text and call nothing.\n\nFunctions:\n{functions}"
)


def openai_name(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64]


def json_schema(schema: Any) -> Any:
    """BFCL's parameter schema in JSON Schema terms: dict -> object, float -> number, tuple -> array,
    any -> no type constraint. Property names are never touched."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k not in ("properties", "items", "additionalProperties")}
    kind = schema.get("type")
    if kind == "any":
        out.pop("type")
    elif isinstance(kind, str):
        out["type"] = TYPES.get(kind, kind)
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {name: json_schema(s) for name, s in schema["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out[key] = json_schema(schema[key])
    return out


def tools(item: Item) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": openai_name(f["name"]),
                "description": str(f.get("description") or ""),
                "parameters": json_schema(f.get("parameters") or {"type": "dict", "properties": {}}),
            },
        }
        for f in item.functions
    ]


def name_map(item: Item) -> dict[str, str]:
    """OpenAI tool name -> BFCL function name (both spellings map, so either form decodes)."""
    names = {f["name"]: f["name"] for f in item.functions}
    names.update({openai_name(f["name"]): f["name"] for f in item.functions})
    return names


def messages(item: Item) -> list[dict[str, Any]]:
    docs = json.dumps(
        [
            {"name": t["function"]["name"], **{k: v for k, v in t["function"].items() if k != "name"}}
            for t in tools(item)
        ],
        ensure_ascii=False,
    )
    system = SYSTEM.format(functions=docs)
    own = [m for m in item.messages if m.get("role") == "system"]
    rest = [m for m in item.messages if m.get("role") != "system"]
    if own:
        system = f"{own[0].get('content', '')}\n\n{system}"
    return [{"role": "system", "content": system}, *rest]


def request(
    item: Item, *, metadata: dict[str, Any] | None = None, constrained: bool = False
) -> dict[str, Any]:
    """The chat request of ``item`` (no ``model``): messages, tools and optional ``metadata``;
    ``constrained`` adds :func:`response_format` (where the category allows one)."""
    body: dict[str, Any] = {"messages": messages(item), "tools": tools(item)}
    if metadata is not None:
        body["metadata"] = metadata
    if constrained and (answer := response_format(item)) is not None:
        body["response_format"] = answer
    return body


def response_format(item: Item) -> dict[str, Any] | None:
    """A ``json_schema`` response format for the answer as a bare ``{"name", "arguments"}`` object (a
    list of them for the parallel categories), each function's name an enum and its arguments its own
    parameter schema, so a server with guided decoding can only write a call of a declared function with
    well-typed arguments (a small model rarely writes a parseable call otherwise). None for irrelevance,
    whose right answer calls nothing."""
    if item.category == "irrelevance":
        return None
    variants = [
        {
            "type": "object",
            "properties": {"name": {"enum": [f["name"]]}, "arguments": f["parameters"]},
            "required": ["name", "arguments"],
        }
        for f in (t["function"] for t in tools(item))
    ]
    one: dict[str, Any] = variants[0] if len(variants) == 1 else {"anyOf": variants}
    schema = {"type": "array", "items": one, "minItems": 1} if "parallel" in item.category else one
    return {"type": "json_schema", "json_schema": {"name": "call", "schema": schema}}


class DecodeError(ValueError):
    """An answer that tries to call a function but does not say which, or with what, in valid JSON."""


def _as_call(obj: Any, names: dict[str, str]) -> Call:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise DecodeError("a call must be an object with a string 'name'")
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = loads_answer(arguments)
        except json.JSONDecodeError as exc:
            raise DecodeError(f"arguments of {obj['name']!r} are not JSON: {exc.msg}") from None
        except ValueError as exc:  # nested past the answer depth bound
            raise DecodeError(f"arguments of {obj['name']!r} are not readable: {exc}") from None
    if not isinstance(arguments, dict):
        raise DecodeError(f"arguments of {obj['name']!r} are not an object")
    name = str(obj["name"])
    return {names.get(name, name): arguments}


def decode(item: Item, message: dict[str, Any]) -> list[Call]:
    """The calls an answer makes, in BFCL's form; [] when it calls nothing. Raises DecodeError for an
    attempted call that cannot be read (BFCL counts it as a failure to produce a valid call)."""
    names = name_map(item)
    calls: list[Call] = []
    for tool_call in message.get("tool_calls") or []:
        function = (tool_call or {}).get("function") if isinstance(tool_call, dict) else None
        if not isinstance(function, dict):
            raise DecodeError("a tool call without a function")
        calls.append(_as_call(function, names))
    if calls:
        return calls
    content = message.get("content")
    try:
        values, from_blocks = written_calls(content if isinstance(content, str) else "")
    except TextCallError as exc:
        raise DecodeError(str(exc)) from None
    if from_blocks:  # a block that is not a readable call is a failed call
        return [_as_call(value, names) for value in values]
    try:
        return [_as_call(value, names) for value in values]
    except DecodeError:
        return []  # bare JSON that is not a readable call: no call


def tool_call_message(item: Item, calls: list[Call]) -> dict[str, Any]:
    """An assistant message making ``calls`` as OpenAI tool calls (the BFCL names mapped to tool names)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": openai_name(name), "arguments": json.dumps(args, ensure_ascii=False)},
            }
            for i, call in enumerate(calls)
            for name, args in call.items()
        ],
    }
