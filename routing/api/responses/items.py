"""``GET /v1/responses/{id}/input_items``: the items of a stored conversation, paged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from routing.api.responses.protocol import ID_PREFIX
from routing.api.responses.store import Stored, facts_of
from routing.errors import bad_request


@dataclass(frozen=True)
class Page:
    """``limit`` (1 to 100, default 20), ``order`` (``desc``, the default, or ``asc``) and ``after``
    (an item id: the page starts past it), as OpenAI's list endpoints take them."""

    limit: int = 20
    order: str = "desc"
    after: str | None = None


def page_of(query: str) -> Page:
    """The pagination of a query string; a bad value is a 400 naming it. ``include`` is accepted (no
    item of a chat call has more to include); other parameters are ignored, as OpenAI ignores them."""
    params = dict(parse_qsl(query, keep_blank_values=True))
    limit = params.get("limit", "20")
    if not limit.isdigit() or not 1 <= int(limit) <= 100:
        raise bad_request(
            f"Invalid 'limit': integer between 1 and 100 expected, got {limit!r}.", param="limit"
        )
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise bad_request(f"Invalid 'order': 'asc' or 'desc' expected, got {order!r}.", param="order")
    return Page(int(limit), order, params.get("after") or None)


def _input_text(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    parts = []
    for part in content or []:
        if part.get("type") == "image_url":
            image = part.get("image_url") or {}
            detail = image.get("detail", "auto")
            parts.append({"type": "input_image", "image_url": image.get("url"), "detail": detail})
        else:
            parts.append({"type": "input_text", "text": part.get("text", "")})
    return parts


def _items_of(response_id: str, position: int, message: dict[str, Any]) -> list[dict[str, Any]]:
    """One chat message of a stored request as the Responses input items it came from."""
    at = f"{response_id.removeprefix(ID_PREFIX)}_{position}"
    role = message.get("role")
    if role == "tool":
        output = {"call_id": message.get("tool_call_id"), "output": message.get("content") or ""}
        return [{"type": "function_call_output", "id": f"fco_{at}", **output, "status": "completed"}]
    if role != "assistant":
        content = _input_text(message.get("content"))
        return [
            {"type": "message", "id": f"msg_{at}", "role": role, "content": content, "status": "completed"}
        ]
    items: list[dict[str, Any]] = []
    if message.get("content"):
        text = [{"type": "output_text", "text": message["content"], "annotations": [], "logprobs": []}]
        items.append(
            {
                "type": "message",
                "id": f"msg_{at}",
                "role": "assistant",
                "content": text,
                "status": "completed",
            }
        )
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{at}_{index}",
                "call_id": call.get("id"),
                "name": function.get("name", ""),
                "arguments": function.get("arguments", ""),
                "status": "completed",
            }
        )
    return items


def input_items(stored: Stored) -> list[dict[str, Any]]:
    """The input items of a stored response, oldest first: those of its own request (not the
    conversation it continued, nor its ``instructions``), as OpenAI lists them."""
    messages = stored.request.get("messages") or []
    facts = facts_of(stored.request) or {}
    start = facts.get("input_from")
    if not isinstance(start, int):  # a response stored before input_from was kept
        start = 1 if facts.get("instructions") else 0
    items: list[dict[str, Any]] = []
    for position in range(start, len(messages)):
        items += _items_of(stored.response_id, position, messages[position])
    return items


def items_page(items: list[dict[str, Any]], page: Page) -> dict[str, Any]:
    """One page of ``items`` as OpenAI's list object; an unknown ``after`` is a 400."""
    ordered = items if page.order == "asc" else items[::-1]
    if page.after is not None:
        ids = [item["id"] for item in ordered]
        if page.after not in ids:
            raise bad_request(f"Invalid 'after': no input item with id '{page.after}'.", param="after")
        ordered = ordered[ids.index(page.after) + 1 :]
    data = ordered[: page.limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(ordered) > page.limit,
    }
