"""A Responses request as the gateway's one call: chat messages, function tools, ``text.format`` as
``response_format``, the stored conversation of ``previous_response_id`` prepended. A content part's
``prompt_cache_breakpoint`` asks for a prompt-cache write: it becomes the chat part's ``cache_control``
(as Anthropic's breakpoints do, routing/api/messages/cache.py), so the write is priced, or dropped where
the backend has no cache-write price (routing/prompt_cache.py); a malformed one is a 400 naming the
caller's part."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from routing.api.messages.cache import Origins
from routing.api.responses.protocol import (
    RESERVED,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    FunctionTool,
    InputImage,
    InputText,
    MessageItem,
    NamespaceTool,
    OutputText,
    Refusal,
    ResponsesRequest,
    TextConfig,
    TextFormatJsonObject,
    TextFormatText,
    param_of,
)
from routing.errors import bad_request
from routing.protocol import ChatRequest


def _image(part: InputImage, where: str) -> dict[str, Any]:
    if not part.image_url:
        raise bad_request(
            f"{where}: an input_image needs an image_url (files are not supported)", param=where
        )
    image: dict[str, Any] = {"url": part.image_url}
    if part.detail in ("low", "high"):
        image["detail"] = part.detail
    return {"type": "image_url", "image_url": image}


BREAKPOINT = "_from"  # a part's Responses location while translating (to_chat takes it off)


def _breakpoint(part: InputText | InputImage, chat: dict[str, Any], at: str) -> dict[str, Any]:
    """``chat`` with ``part``'s prompt-cache breakpoint as a ``cache_control``, checked."""
    marker = part.prompt_cache_breakpoint
    if marker is None:
        return chat
    where = f"{at}.prompt_cache_breakpoint"
    if set(marker) - {"mode"} or marker.get("mode", "explicit") != "explicit":
        raise bad_request(f"{where}: must be {{'mode': 'explicit'}}", param=where)
    return {**chat, "cache_control": {"type": "ephemeral"}, BREAKPOINT: where}


def _parts(content: list[Any], where: str) -> str | list[dict[str, Any]]:
    """Content parts as chat content: one string when all are text without a cache breakpoint, else
    text and image parts."""
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        if isinstance(part, InputText):
            parts.append(_breakpoint(part, {"type": "text", "text": part.text}, at))
        elif isinstance(part, OutputText):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, Refusal):
            parts.append({"type": "text", "text": part.refusal})
        elif isinstance(part, InputImage):
            parts.append(_breakpoint(part, _image(part, at), at))
        else:
            raise bad_request(f"{at}: input_file is not supported", param=at)
    if all(part["type"] == "text" and "cache_control" not in part for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def _assistant_slot(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message a function_call item joins: the one just before, else a new one."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        return last
    message: dict[str, Any] = {"role": "assistant", "content": None}
    messages.append(message)
    return message


def chat_messages(items: str | list[Any]) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if isinstance(item, MessageItem):
            content = item.content
            body = content if isinstance(content, str) else _parts(content, f"{where}.content")
            if item.role == "assistant" and not isinstance(body, str):
                raise bad_request(f"{where}.content: an assistant message holds text only", param=where)
            out.append({"role": item.role, "content": body})
        elif isinstance(item, FunctionCallItem):
            slot = _assistant_slot(out)
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            slot.setdefault("tool_calls", []).append(call)
        elif isinstance(item, FunctionCallOutputItem):
            output = item.output
            text = output if isinstance(output, str) else _parts(output, f"{where}.output")
            if not isinstance(text, str):
                raise bad_request(f"{where}.output: a function_call_output holds text only", param=where)
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": text})
        # reasoning items: a chat backend takes no such input
    return out


def _functions(tools: list[Any]) -> tuple[list[FunctionTool], dict[str, str]]:
    """The function tools a chat backend is offered, a namespace's among them, and the namespace of
    each of those by name; hosted tools are left out. Two functions of one name are a 400."""
    functions: list[FunctionTool] = []
    namespaces: dict[str, str] = {}
    for tool in tools:
        if isinstance(tool, FunctionTool):
            functions.append(tool)
        elif isinstance(tool, NamespaceTool):
            functions += tool.tools
            namespaces.update({inner.name: tool.name for inner in tool.tools})
    names = [tool.name for tool in functions]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise bad_request(f"tools: the function name {twice!r} is given twice.", param="tools")
    return functions, namespaces


def _tool_choice(choice: str | FunctionChoice | None) -> str | dict[str, Any] | None:
    if isinstance(choice, FunctionChoice):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def _response_format(text: TextConfig | None) -> dict[str, Any] | None:
    fmt = text.format if text is not None else None
    if fmt is None or isinstance(fmt, TextFormatText):
        return None
    if isinstance(fmt, TextFormatJsonObject):
        return {"type": "json_object"}
    schema: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema_}
    if fmt.description is not None:
        schema["description"] = fmt.description
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": schema}


def to_chat(
    request: ResponsesRequest, history: list[dict[str, Any]] | None = None, origins: Origins | None = None
) -> ChatRequest:
    """The chat request of ``request``; ``history``: the conversation of its previous response;
    ``origins`` learns where each cache breakpoint came from."""
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    messages += history or []
    input_from = len(messages)
    messages += chat_messages(request.input)
    origins = origins if origins is not None else Origins()
    for i, message in enumerate(messages[input_from:], start=input_from):
        for j, part in enumerate(message["content"] if isinstance(message.get("content"), list) else []):
            if BREAKPOINT in part:
                origins.note(i, j, part.pop(BREAKPOINT))
    if not messages:
        raise bad_request("input: a response needs at least one input item.", param="input")
    facts: dict[str, Any] = {
        "store": request.store,
        "instructions": bool(request.instructions),
        "previous_response_id": request.previous_response_id,
        "input_from": input_from,
    }
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "stream": request.stream,
        "metadata": {**(request.metadata or {}), RESERVED: facts},
    }
    if request.stream:
        body["stream_options"] = {"include_usage": True}  # the completed event carries the usage
    functions, namespaces = _functions(request.tools or [])
    if namespaces:
        facts["namespaces"] = namespaces
    if functions:
        body["tools"] = [
            {"type": "function", "function": tool.model_dump(exclude={"type"}, exclude_none=True)}
            for tool in functions
        ]
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    choice = _tool_choice(request.tool_choice)
    if choice is not None:
        body["tool_choice"] = choice
    fmt = _response_format(request.text)
    if fmt is not None:
        body["response_format"] = fmt
    if request.text is not None and request.text.verbosity is not None:
        body["verbosity"] = request.text.verbosity
    effort = request.reasoning.effort if request.reasoning is not None else None
    if effort is not None and effort != "none":
        body["reasoning_effort"] = "high" if effort == "xhigh" else effort
    if request.max_output_tokens is not None:
        body["max_tokens"] = request.max_output_tokens
    for name in ("temperature", "top_p", "user", "safety_identifier", "prompt_cache_key", "service_tier"):
        value = getattr(request, name)
        if value is not None:
            body[name] = value
    try:
        return ChatRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = param_of(tuple(first["loc"]))
        raise bad_request(f"Invalid value for '{param}': {first['msg']}", param=param) from None
