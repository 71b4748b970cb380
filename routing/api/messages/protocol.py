"""The Anthropic Messages API (``POST /v1/messages``), translated to and from the gateway's one call.

A Messages request becomes a chat-completions request (routing/protocol.py), the representation the
router, verifiers, budgets, ledger and learning cycle all work on; the answer comes back as an Anthropic
message, and a stream as Anthropic's events. Each leg still reaches its backend in that backend's own
protocol (routing/call/upstream.py: directly for OpenAI-protocol servers, through litellm otherwise), so a
call that arrives here and falls back to a teacher on another protocol still answers in this one.

Only documented request fields are accepted (``extra="forbid"``), as on the chat endpoint: those of the
2026 API, and ``temperature``/``top_p``/``top_k`` that older clients still send. ``output_config.format``
becomes a JSON-schema ``response_format`` (so a json_schema verifier checks it) and ``effort`` a
``reasoning_effort``; a block's and the request's ``cache_control`` stay on the chat call's content
parts, a tool's on its chat tool and a ``tool_use`` block's on its tool call, priced as cache writes
(messages/cache.py); ``top_k``, ``thinking``, ``service_tier``, ``speed``,
``inference_geo``, ``container``, ``diagnostics``, ``user_profile_id``, ``workspace_id``, ``mcp_servers`` and
``context_management`` are accepted and not forwarded (the chat form has no such field; README).
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from routing.api.messages.cache import Origins, automatic, control_of, marked
from routing.errors import ApiError
from routing.json_body import JsonBodyError, loads_answer, loads_request
from routing.pricing import Usage
from routing.protocol import MAX_OUTPUT_TOKENS, ChatRequest

# Anthropic's error types by HTTP status (docs.anthropic.com, "Errors").
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


def error_body(error: ApiError) -> dict[str, Any]:
    kind = ERROR_TYPES.get(error.status, "api_error" if error.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Block(BaseModel):
    """A content block; its fields are checked by type when translated (``_blocks``)."""

    model_config = ConfigDict(extra="allow")
    type: str


class Message(Strict):
    role: Literal["user", "assistant", "system"]  # a system turn inside the conversation (2026 API)
    content: str | list[Block]


class Tool(Strict):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]
    type: str | None = None
    cache_control: dict[str, Any] | None = None


class ToolChoice(Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Metadata(Strict):
    user_id: str | None = None


class OutputFormat(Strict):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(Strict):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


class CountTokensRequest(Strict):
    """Every documented parameter of ``POST /v1/messages/count_tokens`` (Anthropic API reference, 2026)."""

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[Block] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    output_config: OutputConfig | None = None
    thinking: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None
    speed: Literal["standard", "fast"] | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None
    mcp_servers: list[dict[str, Any]] | None = None
    context_management: dict[str, Any] | None = None


class MessagesRequest(CountTokensRequest):
    """Every documented parameter of ``POST /v1/messages`` (Anthropic API reference, 2026)."""

    max_tokens: int = Field(ge=1, le=MAX_OUTPUT_TOKENS)
    stop_sequences: list[str] | None = None
    stream: bool = False
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    inference_geo: str | None = None
    container: str | dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)


M = TypeVar("M", bound=BaseModel)


def _param(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def parse(raw: bytes, model: type[M], data: Any = None) -> M:
    """``raw`` as ``model``; ``data``: ``raw`` already parsed by ``loads_request`` (see
    ``vet_body_schemas``: a body is parsed once), or None."""
    if data is None:
        try:
            data = loads_request(raw)
        except JsonBodyError as exc:
            raise ApiError(400, exc.message, code=exc.code) from None
    if not isinstance(data, dict):
        raise ApiError(400, "Request body must be a JSON object.", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _param(tuple(first["loc"]))
        if first["type"] == "extra_forbidden":
            raise ApiError(400, f"{where}: Extra inputs are not permitted", param=where) from None
        raise ApiError(400, f"{where}: {first['msg']}", param=where) from None


# --- request: Anthropic -> chat ---------------------------------------------------------------------


def _bad(message: str) -> ApiError:
    return ApiError(400, message)


def _text_of(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise _bad(f"{where}: must be a string or a list of text blocks")
    parts = []
    for i, block in enumerate(content):
        data: Any = block.model_dump() if isinstance(block, BaseModel) else block
        if not isinstance(data, dict) or data.get("type") != "text" or not isinstance(data.get("text"), str):
            raise _bad(f"{where}.{i}: only text blocks are allowed here")
        parts.append(data["text"])
    return "\n".join(parts)


ORIGIN = "_from"  # a part's Messages location while translating (chat_messages takes it off)


def _part(part: dict[str, Any], block: dict[str, Any], where: str) -> dict[str, Any]:
    """``part`` with ``block``'s cache breakpoint, if any, and where it came from."""
    control = control_of(block, where)
    return {**marked(part, control), ORIGIN: f"{where}.cache_control"} if control is not None else part


def _plain(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text parts without breakpoints as one string (as before); else the parts."""
    if all(part["type"] == "text" and "cache_control" not in part for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def _system(content: Any, where: str) -> str | list[dict[str, Any]]:
    text = _text_of(content, where)
    if not isinstance(content, list):
        return text
    blocks = [block.model_dump() if isinstance(block, BaseModel) else block for block in content]
    parts = [_part({"type": "text", "text": b["text"]}, b, f"{where}.{i}") for i, b in enumerate(blocks)]
    return _plain(parts)


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source") or {}
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        url = f"data:{source.get('media_type', 'image/png')};base64,{source['data']}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise _bad(f"{where}.source: an image needs a base64 or url source")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(block.get("tool_use_id"), str):
        raise _bad(f"{where}.tool_use_id: Field required")
    content = block.get("content")
    text = content if isinstance(content, str) else _text_of(content or [], f"{where}.content")
    if block.get("is_error"):
        text = f"Error: {text}"
    inner = enumerate(content if isinstance(content, list) else [])
    marks = [(f"{where}.content.{i}", b) for i, b in inner if isinstance(b, dict) and "cache_control" in b]
    at, source = (where, block) if block.get("cache_control") is not None else (marks or [(where, {})])[-1]
    part = _part({"type": "text", "text": text}, source, at)
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": _plain([part])}


def _user(content: str | list[Block], where: str) -> list[dict[str, Any]]:
    """One user turn: its tool results first (each a ``tool`` message), then the rest as one message."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        data, at = block.model_dump(), f"{where}.content.{i}"
        if data["type"] == "tool_result":
            results.append(_tool_result(data, at))
        elif data["type"] == "text" and isinstance(data.get("text"), str):
            parts.append(_part({"type": "text", "text": data["text"]}, data, at))
        elif data["type"] == "image":
            parts.append(_part(_image(data, at), data, at))
        elif data["type"] in ("thinking", "redacted_thinking"):
            continue
        else:
            raise _bad(f"{at}.type: unsupported content block type {data['type']!r} in a user turn")
    if parts:
        results.append({"role": "user", "content": _plain(parts)})
    return results


_COMPACT_ARGUMENTS = 64 * 1024


def _arguments(value: Any) -> str:
    """A tool_use block's input as the chat call's arguments string. ``json.dumps``'s own spacing up
    to 64 KB (what every client sends: the conversation and its cache keep their text); past that,
    orjson's compact encoding: a 3 MB input cost the event loop 6-20 ms in ``json.dumps`` (a quarter
    of a Messages call's loop time, h37b's py-spy of eight at once), 1-2 ms in orjson."""
    try:
        compact = orjson.dumps(value)
    except orjson.JSONEncodeError:  # an int past 64 bits: json's own encoder writes it
        return json.dumps(value, ensure_ascii=False)
    if len(compact) > _COMPACT_ARGUMENTS:
        return compact.decode()
    return json.dumps(value, ensure_ascii=False)


def _assistant(content: str | list[Block], where: str) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        data, at = block.model_dump(), f"{where}.content.{i}"
        if data["type"] == "text" and isinstance(data.get("text"), str):
            texts.append(_part({"type": "text", "text": data["text"]}, data, at))
        elif data["type"] == "tool_use":
            if not isinstance(data.get("id"), str) or not isinstance(data.get("name"), str):
                raise _bad(f"{at}: a tool_use block needs an id and a name")
            arguments = _arguments(data.get("input") or {})
            call = {
                "id": data["id"],
                "type": "function",
                "function": {"name": data["name"], "arguments": arguments},
            }
            calls.append(marked(call, control_of(data, at)))  # its breakpoint rides on the tool call
        elif data["type"] in ("thinking", "redacted_thinking"):
            continue
        else:
            raise _bad(f"{at}.type: unsupported content block type {data['type']!r} in an assistant turn")
    message: dict[str, Any] = {"role": "assistant", "content": (_plain(texts) or None) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(
    request: MessagesRequest | CountTokensRequest, origins: Origins | None = None
) -> list[dict[str, Any]]:
    """The conversation in chat form; ``origins`` learns where each part's cache breakpoint came from."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": _system(request.system, "system")})
    for i, message in enumerate(request.messages):
        where = f"messages.{i}"
        if message.role == "system":
            out.append({"role": "system", "content": _system(message.content, f"{where}.content")})
        elif message.role == "user":
            out.extend(_user(message.content, where))
        else:
            out.append(_assistant(message.content, where))
    origins = origins if origins is not None else Origins()
    for i, chat in enumerate(out):
        for j, part in enumerate(chat["content"] if isinstance(chat.get("content"), list) else []):
            if ORIGIN in part:
                origins.note(i, j, part.pop(ORIGIN))
    automatic(out, control_of({"cache_control": request.cache_control}, ""), origins)
    return out


def chat_tools(request: MessagesRequest | CountTokensRequest) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if request.tools:
        fields["tools"] = [
            marked(
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                },
                control_of({"cache_control": t.cache_control}, f"tools.{i}"),
            )
            for i, t in enumerate(request.tools)
        ]
    choice = request.tool_choice
    if choice is not None:
        if choice.type == "tool":
            if not choice.name:
                raise _bad("tool_choice.name: Field required when type is 'tool'")
            fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            fields["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
        if choice.disable_parallel_tool_use and request.tools:
            fields["parallel_tool_calls"] = False
    return fields


def to_chat(request: MessagesRequest, origins: Origins | None = None) -> ChatRequest:
    body: dict[str, Any] = {
        "model": request.model,
        "messages": chat_messages(request, origins),
        "max_tokens": request.max_tokens,
        "stream": request.stream,
        **chat_tools(request),
    }
    if request.stream:
        body["stream_options"] = {"include_usage": True}  # Anthropic's events carry the usage
    for name, value in (("temperature", request.temperature), ("top_p", request.top_p)):
        if value is not None:
            body[name] = value
    if request.stop_sequences:
        body["stop"] = request.stop_sequences
    if request.metadata and request.metadata.user_id:
        body["user"] = request.metadata.user_id
    config = request.output_config
    if config is not None and config.format is not None:
        schema = {"name": "output", "schema": config.format.schema_, "strict": True}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    if config is not None and config.effort is not None:
        body["reasoning_effort"] = {"xhigh": "high", "max": "high"}.get(config.effort, config.effort)
    try:
        return ChatRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _bad(f"{_param(tuple(first['loc']))}: {first['msg']}") from None


# --- response: chat -> Anthropic --------------------------------------------------------------------


def _input_of(arguments: str) -> Any:
    try:
        value = loads_answer(arguments or "{}")
    except ValueError:  # not JSON, or nested past the answer depth bound
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id") or "toolu_unknown",
                "name": function.get("name", ""),
                "input": _input_of(function.get("arguments", "")),
            }
        )
    return blocks


def usage_of(usage: dict[str, Any] | None) -> dict[str, int]:
    """Anthropic's usage: input tokens beside those read from and written to the cache (which
    litellm counts in ``prompt_tokens``, as routing/pricing.py settles them)."""
    counted = Usage.from_openai(usage)
    cached = min(counted.cached_tokens, counted.prompt_tokens)
    writes = counted.cache_write_tokens
    written = writes if writes <= counted.prompt_tokens - cached else 0
    return {
        "input_tokens": counted.prompt_tokens - cached - written,
        "output_tokens": counted.completion_tokens,
        "cache_creation_input_tokens": writes,
        "cache_read_input_tokens": cached,
    }


def message_of(
    message_id: str, model: str, message: dict[str, Any], finish_reason: str, usage: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(message),
        "stop_reason": STOP_REASONS.get(finish_reason, "end_turn"),
        "stop_sequence": None,
        "usage": usage_of(usage),
    }
