"""Anthropic's prompt-cache breakpoints (``cache_control``) carried into the chat call.

A Messages block's ``cache_control`` asks the provider to write the prompt up to that block to its
cache, which Anthropic bills above the input price. The chat call keeps it on the content part the
block becomes (``{"type": "text", "text": ..., "cache_control": {...}}``, the form litellm sends on to
Anthropic), so routing/pricing.py prices the write like one sent to ``/v1/chat/completions``: held at
the backend's cache-write price, settled from the usage's cache-creation tokens, or dropped (not sent,
so nothing is written or billed; routing/prompt_cache.py) when the backend has no such price. A
malformed one is a 400 naming the block. The request's top-level ``cache_control``
(automatic caching) is a breakpoint on the last block, as Anthropic places it.

A tool's ``cache_control`` stays on its chat tool and a ``tool_use`` block's on the assistant turn's
tool call (where litellm carries both on to Anthropic), priced by the same rule
(routing/cache_markers.py). ``count_tokens`` counts the parts with their breakpoints and calls no
model, so it writes nothing.
"""

from __future__ import annotations

import re
from typing import Any

from routing.errors import ApiError

TTLS = ("5m", "1h")
_CHAT_PARAM = re.compile(r"messages\[(\d+)\]\.content\[(\d+)\]\.cache_control")


def control_of(block: dict[str, Any], where: str) -> dict[str, Any] | None:
    """``block``'s cache breakpoint as the chat part carries it, checked; None when it has none."""
    control = block.get("cache_control")
    if control is None:
        return None
    at = f"{where}.cache_control" if where else "cache_control"
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise ApiError(400, f"{at}: must be an object with type 'ephemeral'", param=at)
    unknown = sorted(set(control) - {"type", "ttl"})
    if unknown:
        raise ApiError(400, f"{at}.{unknown[0]}: Extra inputs are not permitted", param=at)
    ttl = control.get("ttl")
    if ttl is not None and ttl not in TTLS:
        raise ApiError(400, f"{at}.ttl: must be one of {', '.join(TTLS)}", param=at)
    return {"type": "ephemeral", **({"ttl": ttl} if ttl is not None else {})}


def marked(part: dict[str, Any], control: dict[str, Any] | None) -> dict[str, Any]:
    return {**part, "cache_control": control} if control is not None else part


class Origins:
    """Where each chat part's breakpoint came from in the Messages request, so that a refusal naming
    that part names the caller's block (``system.1.cache_control``), not the chat call's part."""

    def __init__(self) -> None:
        self._of: dict[tuple[int, int], str] = {}

    def note(self, message: int, part: int, param: str) -> None:
        self._of.setdefault((message, part), param)

    def rename(self, error: ApiError) -> ApiError:
        found = _CHAT_PARAM.fullmatch(error.param or "")
        origin = self._of.get((int(found[1]), int(found[2]))) if found else None
        if origin is None or error.param is None:
            return error
        return ApiError(
            error.status,
            error.message.replace(error.param, origin),
            type=error.type,
            code=error.code,
            param=origin,
            headers=error.headers,
        )


def automatic(messages: list[dict[str, Any]], control: dict[str, Any] | None, origins: Origins) -> None:
    """The top-level ``cache_control``: a breakpoint on the last block of the last message that has
    text or parts (an assistant turn of tool calls only has none to hold it)."""
    if control is None:
        return
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content")
        if isinstance(content, str) and content:
            messages[i]["content"] = [{"type": "text", "text": content, "cache_control": control}]
        elif isinstance(content, list) and content:
            content[-1] = {**content[-1], "cache_control": control}
        else:
            continue
        origins.note(i, len(messages[i]["content"]) - 1, "cache_control")
        return
