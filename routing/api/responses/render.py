"""The answer as a Response object: output items (a message, function calls), usage, the echo of the
request's tools, choice and text format."""

from __future__ import annotations

from typing import Any

from routing.api.responses.protocol import ID_PREFIX, RESERVED
from routing.api.responses.store import Stored, facts_of


def message_item_id(response_id: str) -> str:
    return f"msg_{response_id.removeprefix(ID_PREFIX)}"


def call_item_id(response_id: str, index: int) -> str:
    return f"fc_{response_id.removeprefix(ID_PREFIX)}_{index}"


def message_item(response_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "type": "message",
        "id": message_item_id(response_id),
        "status": status,
        "role": "assistant",
        "content": content if status == "completed" else [],
    }


def call_item(
    response_id: str,
    index: int,
    call: dict[str, Any],
    status: str = "completed",
    namespaces: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ``function_call`` output item; one of a namespace's functions names its ``namespace``."""
    function = call.get("function") or {}
    name = function.get("name") or ""
    item = {
        "type": "function_call",
        "id": call_item_id(response_id, index),
        "call_id": call.get("id") or call_item_id(response_id, index),
        "name": name,
        "arguments": (function.get("arguments") or "") if status == "completed" else "",
        "status": status,
    }
    namespace = (namespaces or {}).get(name)
    if namespace:
        item["namespace"] = namespace
    return item


def namespaces_of(request: dict[str, Any]) -> dict[str, str]:
    """The namespace of each namespaced function of a stored chat request, by name."""
    namespaces = (facts_of(request) or {}).get("namespaces")
    return namespaces if isinstance(namespaces, dict) else {}


def output_items(
    response_id: str, message: dict[str, Any], namespaces: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if message.get("content"):
        items.append(message_item(response_id, message["content"]))
    elif message.get("refusal"):
        item = message_item(response_id, "")
        item["content"] = [{"type": "refusal", "refusal": message["refusal"]}]
        items.append(item)
    for index, call in enumerate(message.get("tool_calls") or []):
        items.append(call_item(response_id, index, call, namespaces=namespaces))
    return items


INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _tools_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    tools = []
    for tool in request.get("tools") or []:
        function = tool.get("function") or {}
        tools.append(
            {
                "type": "function",
                "name": function.get("name"),
                "description": function.get("description"),
                "parameters": function.get("parameters"),
                "strict": function.get("strict"),
            }
        )
    return tools


def _tool_choice_of(request: dict[str, Any]) -> Any:
    choice = request.get("tool_choice", "auto")
    if isinstance(choice, dict):
        return {"type": "function", "name": (choice.get("function") or {}).get("name")}
    return choice


def _text_of(request: dict[str, Any]) -> dict[str, Any]:
    fmt = request.get("response_format") or {"type": "text"}
    text: dict[str, Any] = {"format": {"type": fmt.get("type", "text")}}
    if fmt.get("type") == "json_schema":
        schema = fmt.get("json_schema") or {}
        text["format"] = {
            "type": "json_schema",
            "name": schema.get("name"),
            "schema": schema.get("schema"),
            "description": schema.get("description"),
            "strict": schema.get("strict"),
        }
    if request.get("verbosity"):
        text["verbosity"] = request["verbosity"]
    return text


def response_of(stored: Stored, *, status: str | None = None) -> dict[str, Any]:
    """The Response object of a call; ``status="in_progress"``: the skeleton a stream starts with."""
    request = stored.request
    facts = facts_of(request) or {}
    messages = request.get("messages") or []
    instructions = messages[0]["content"] if facts.get("instructions") and messages else None
    metadata = {k: v for k, v in (request.get("metadata") or {}).items() if k != RESERVED}
    output: list[dict[str, Any]] = []
    error = incomplete = None
    if status is None:
        finish_reason = (stored.response or {}).get("finish_reason")
        message = (stored.response or {}).get("message")
        if stored.status_code != 200 or not isinstance(message, dict):
            status = "failed"
            error = {"code": "server_error", "message": stored.error or "The call failed."}
        else:
            output = output_items(stored.response_id, message, namespaces_of(request))
            status = "incomplete" if finish_reason in INCOMPLETE else "completed"
            if status == "incomplete":
                incomplete = {"reason": INCOMPLETE[str(finish_reason)]}
    effort = request.get("reasoning_effort")
    return {
        "id": stored.response_id,
        "object": "response",
        "created_at": stored.created_at,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": instructions,
        "max_output_tokens": request.get("max_tokens"),
        "model": stored.model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": facts.get("previous_response_id"),
        "reasoning": {"effort": effort, "summary": None},
        "store": facts.get("store", True),
        "temperature": request.get("temperature"),
        "text": _text_of(request),
        "tool_choice": _tool_choice_of(request),
        "tools": _tools_of(request),
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "usage": stored.usage if status not in ("in_progress", "failed") else None,
        "user": request.get("user"),
        "safety_identifier": request.get("safety_identifier"),
        "metadata": metadata,
    }
