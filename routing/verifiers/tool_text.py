"""Tool calls written in an answer's text, by a model served without a tool-call parser.

Two forms: Hermes ``<tool_call>{"name", "arguments"}</tool_call>`` blocks, and a bare (or fenced)
``{"name", "arguments"}`` JSON object or a list of them, as a ``json_schema`` response format makes a
model write.

Blocks and fences are found with plain string operations (``str.find``, ``strip``), linear in the
answer's length: the regular expressions they replace were quadratic on long runs of blanks, and this
runs on model answers (issue 37).
"""

from __future__ import annotations

import json
from typing import Any

from routing.json_body import JsonTooDeep, loads_answer

OPEN, CLOSE, FENCE = "<tool_call>", "</tool_call>", "```"


def blocks(text: str) -> list[str]:
    """The stripped bodies of the ``<tool_call>`` blocks of ``text``, in order; an unclosed last block
    runs to the end."""
    found: list[str] = []
    start = text.find(OPEN)
    while start != -1:
        start += len(OPEN)
        end = text.find(CLOSE, start)
        if end == -1:
            found.append(text[start:].strip())
            break
        found.append(text[start:end].strip())
        start = text.find(OPEN, end + len(CLOSE))
    return found


def unfenced(text: str) -> str:
    """``text`` without one fence around it ("```" or "```json" before, "```" after, blanks anywhere
    around), stripped; the stripped text itself when it is not fenced."""
    stripped = text.strip()
    if len(stripped) >= 2 * len(FENCE) and stripped.startswith(FENCE) and stripped.endswith(FENCE):
        inner = stripped[len(FENCE) : -len(FENCE)]
        return inner.removeprefix("json").strip()
    return stripped


class TextCallError(ValueError):
    """A ``<tool_call>`` block that is not JSON, or written JSON nested too deeply to read."""


def written_calls(text: str) -> tuple[list[Any], bool]:
    """The JSON values the text writes as calls, and whether they came from ``<tool_call>`` blocks (each
    value one call, its shape not yet checked). Without blocks: the bare or fenced JSON when every value
    of it is an object with a string ``name``, else none. Raises :class:`TextCallError` for a block that
    is not JSON, and for a block or bare JSON nested past the answer depth bound (routing/json_body.py)."""
    found = blocks(text)
    if found:
        values: list[Any] = []
        for block in found:
            try:
                data = loads_answer(block)
            except json.JSONDecodeError as exc:
                raise TextCallError(f"a <tool_call> block is not JSON: {exc.msg}") from None
            except JsonTooDeep as exc:
                raise TextCallError(f"a <tool_call> block is not readable: {exc}") from None
            values.extend(data if isinstance(data, list) else [data])
        return values, True
    candidate = unfenced(text)
    if not candidate.startswith(("{", "[")):
        return [], False
    try:
        data = loads_answer(candidate)
    except json.JSONDecodeError:
        return [], False
    except JsonTooDeep as exc:
        raise TextCallError(f"the answer's JSON is not readable: {exc}") from None
    values = data if isinstance(data, list) else [data]
    if values and all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in values):
        return values, False
    return [], False


def cut_short(text: str) -> bool:
    """Text that starts a JSON call (object or list) but does not parse: an answer cut off mid-call."""
    candidate = unfenced(text)
    if not candidate.startswith(("{", "[")):
        return False
    try:
        loads_answer(candidate)
    except json.JSONDecodeError:
        return True
    except JsonTooDeep:  # complete but too deep to read: written_calls says so
        return False
    return False


def as_tool_calls(values: list[Any]) -> list[dict[str, Any]]:
    """Written calls in the OpenAI ``tool_calls`` shape (``arguments`` a JSON string; ``parameters`` is
    read as ``arguments``, as some models write it)."""
    out: list[dict[str, Any]] = []
    for i, value in enumerate(values):
        if not isinstance(value, dict):
            out.append({"id": f"text_{i}", "type": "function", "function": None})
            continue
        arguments = value.get("arguments", value.get("parameters", {}))
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        function = {"name": value.get("name"), "arguments": raw}
        out.append({"id": f"text_{i}", "type": "function", "function": function})
    return out
