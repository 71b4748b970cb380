"""Where a chat-completions body asks the provider for prompt-cache writes, and that body without them.

A ``cache_control`` (Anthropic-style, which litellm carries on to Anthropic) can sit in three places of
the chat form: a content part (``messages[i].content[j]``), a tool call of an assistant turn
(``messages[i].tool_calls[k]``, a ``tool_use`` block's breakpoint) and a tool definition
(``tools[t]``). Each asks for a write billed above the input price, so each is found here, priced by
routing/pricing.py and dropped where the backend has no write price (routing/prompt_cache.py); a
malformed one is a 400 naming it (``check``). ``/v1/messages`` and ``/v1/responses`` translate their
breakpoints into these places, checked in their own words.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from routing.errors import ApiError

TTLS = ("5m", "1h")
FIELD = "cache_control"


def markers(body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Each ``(param, cache_control)`` of ``body`` that is set (not None), in body order. A message
    whose content is text and that has no tool calls is passed over at once: this runs several times
    per call (the check, each leg's price terms), over up to 14,000 messages (routing/call/body_work.py)."""
    messages = body.get("messages")
    for i, message in enumerate(messages if type(messages) is list else ()):
        if type(message) is not dict:
            continue
        content, calls = message.get("content"), message.get("tool_calls")
        if type(content) is list:
            for j, part in enumerate(content):
                if type(part) is dict and part.get(FIELD) is not None:
                    yield f"messages[{i}].content[{j}].{FIELD}", part[FIELD]
        if type(calls) is list:
            for k, call in enumerate(calls):
                if type(call) is dict and call.get(FIELD) is not None:
                    yield f"messages[{i}].tool_calls[{k}].{FIELD}", call[FIELD]
    for t, tool in enumerate(_list(body.get("tools"))):
        if isinstance(tool, dict) and tool.get(FIELD) is not None:
            yield f"tools[{t}].{FIELD}", tool[FIELD]


def marked(body: dict[str, Any]) -> bool:
    return next(markers(body), None) is not None


def unmarked(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with every marker taken off (a copy of what held one; the rest shared)."""
    out = dict(body)
    messages = body.get("messages")
    if isinstance(messages, list):
        out["messages"] = [_message_unmarked(message) for message in messages]
    tools = body.get("tools")
    if isinstance(tools, list):
        out["tools"] = [_bare(tool) for tool in tools]
    return out


def check(body: dict[str, Any]) -> None:
    """A 400 naming the first malformed marker of ``body``: each must be ``{"type": "ephemeral"}``
    with an optional ``ttl`` of ``5m`` or ``1h``, nothing else."""
    for param, control in markers(body):
        problem = problem_of(control)
        if problem is not None:
            raise ApiError(400, f"Invalid value for '{param}': {problem}", param=param)


def problem_of(control: Any) -> str | None:
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        return "must be an object with type 'ephemeral'"
    unknown = sorted(set(control) - {"type", "ttl"})
    if unknown:
        return f"unknown field {str(unknown[0])[:64]!r} (only type and ttl)"
    if control.get("ttl") is not None and control["ttl"] not in TTLS:
        return f"ttl must be one of {', '.join(TTLS)}"
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _bare(item: Any) -> Any:
    if not isinstance(item, dict) or FIELD not in item:
        return item
    return {name: value for name, value in item.items() if name != FIELD}


def _message_unmarked(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    out = message
    for name in ("content", "tool_calls"):
        items = message.get(name)
        if isinstance(items, list) and any(isinstance(item, dict) and FIELD in item for item in items):
            out = {**out, name: [_bare(item) for item in items]}
    return out
