"""The OpenAI Responses API (``POST /v1/responses``), translated to and from the gateway's one call.

A Responses request becomes a chat-completions request (routing/protocol.py), the representation the
router, verifiers, budgets, ledger and learning cycle all work on; the answer comes back as a Response
object (routing/responses_stream.py: a stream as the typed ``response.*`` events).

Only documented request fields are accepted (``extra="forbid"``), one level down as well (input
items, content parts, tools), so no caller-supplied connection argument reaches a backend. Input items:
messages (``input_text``, ``input_image`` with a URL or data URL, ``output_text``, ``refusal``),
``function_call`` and ``function_call_output``; ``reasoning`` items are accepted and dropped (a chat
backend has no such input). Tools: function tools only. ``text.format`` becomes the chat
``response_format`` (so a json_schema verifier checks a JSON-schema answer), ``reasoning.effort`` the
``reasoning_effort``. ``include``, ``truncation``, ``top_logprobs``, ``max_tool_calls``,
``prompt_cache_retention`` and ``stream_options`` are accepted and not forwarded.

Stored responses need no table of their own: the response id is ``resp_<invocation uuid hex>`` and
names the call's ledger row (routing/models.py Invocation), whose ``request`` holds the whole
conversation in chat form and whose ``response`` holds the answer; the row's ``request.metadata``
carries the Responses-only facts under ``skillgate_response`` (``store``, whether ``messages[0]`` is
the ``instructions``, the ``previous_response_id``); metadata is gateway-only, it never reaches a
backend (protocol.GATEWAY_ONLY). So a stored response lives as long as the row keeps its bodies
(LEDGER_RETENTION_DAYS); ``store: false`` keeps the row (costs, learning) but makes the response
neither retrievable nor continuable; ``DELETE`` blanks the bodies as the retention purge does and keeps
the row and its costs.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl

from django.db import transaction
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from routing import ledger_writer
from routing.errors import ApiError, bad_request
from routing.json_body import JsonBodyError, loads_request
from routing.ledger import has_body, request_stub
from routing.models import Invocation
from routing.protocol import MAX_OUTPUT_TOKENS, ChatRequest

RESERVED = "skillgate_response"  # the stored request's metadata key with the Responses-only facts
ID_PREFIX = "resp_"
ROW_FIELDS = (
    "id",
    "created_at",
    "api_key_id",
    "requested_model",
    "served_by",
    "status_code",
    "error",
    "legs",
    "request",
    "response",
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- request ------------------------------------------------------------------------------------


class InputText(Strict):
    type: Literal["input_text"]
    text: str
    prompt_cache_breakpoint: dict[str, Any] | None = None


class InputImage(Strict):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] = "auto"
    prompt_cache_breakpoint: dict[str, Any] | None = None


class InputFile(Strict):
    type: Literal["input_file"]
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None


class OutputText(Strict):
    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None


class Refusal(Strict):
    type: Literal["refusal"]
    refusal: str


Content = Annotated[InputText | InputImage | InputFile | OutputText | Refusal, Field(discriminator="type")]
Status = Literal["in_progress", "completed", "incomplete"]


class MessageItem(Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Content]
    id: str | None = None
    status: Status | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1, max_length=64)
    arguments: str
    id: str | None = None
    status: Status | None = None
    namespace: str | None = None
    caller: dict[str, Any] | None = None
    async_: bool | None = Field(default=None, alias="async")


class FunctionCallOutputItem(Strict):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[Content]
    id: str | None = None
    status: Status | None = None
    name: str | None = None
    namespace: str | None = None
    caller: dict[str, Any] | None = None


class ReasoningItem(Strict):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = None
    status: Status | None = None


def _item_kind(value: Any) -> str:
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", "message")
    return kind if isinstance(kind, str) else ""


Item = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_kind),
]


class FunctionTool(Strict):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamespaceTool(Strict):
    """Function tools grouped under a namespace (Codex's sub-agent tools): offered to a chat backend
    as plain functions, and a call of one answers with its ``namespace``."""

    type: Literal["namespace"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    tools: list[FunctionTool]


class HostedTool(BaseModel):
    """A tool OpenAI runs itself (web search, file search, ...): accepted and not offered to the
    model, since a chat backend can run none of them."""

    model_config = ConfigDict(extra="allow")
    type: Literal[
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "mcp",
    ]


Tool = Annotated[FunctionTool | NamespaceTool | HostedTool, Field(discriminator="type")]


class FunctionChoice(Strict):
    type: Literal["function"]
    name: str = Field(min_length=1)


class TextFormatText(Strict):
    type: Literal["text"]


class TextFormatJsonObject(Strict):
    type: Literal["json_object"]


class TextFormatJsonSchema(Strict):
    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=64)
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(Strict):
    format: (
        Annotated[TextFormatText | TextFormatJsonObject | TextFormatJsonSchema, Field(discriminator="type")]
        | None
    ) = None
    verbosity: Literal["low", "medium", "high"] | None = None


class Reasoning(Strict):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class StreamOptions(Strict):
    include_obfuscation: bool | None = None


class ResponsesRequest(Strict):
    """The documented parameters of ``POST /v1/responses`` the gateway serves (OpenAI API reference, 2026)."""

    model: str = Field(min_length=1)
    input: str | list[Item]
    instructions: str | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: Reasoning | None = None
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    metadata: dict[str, Any] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    store: bool = True
    previous_response_id: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    max_tool_calls: int | None = Field(default=None, ge=1)
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    background: bool | None = None
    client_metadata: dict[str, Any] | None = None

    @field_validator("background")
    @classmethod
    def _not_background(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError("background responses are not supported")
        return value

    @field_validator("metadata")
    @classmethod
    def _not_reserved(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value and RESERVED in value:
            raise ValueError(f"the key {RESERVED!r} is reserved by the gateway")
        return value


def _param(loc: tuple[int | str, ...]) -> str:
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name


def parse(raw: bytes) -> ResponsesRequest:
    try:
        data = loads_request(raw)
    except JsonBodyError as exc:
        raise bad_request(exc.message, param=exc.param, code=exc.code) from None
    if not isinstance(data, dict):
        raise bad_request("Request body must be a JSON object.", code="invalid_json")
    try:
        return ResponsesRequest.model_validate(data)
    except ValidationError as exc:
        # A value no branch of a union takes fails each branch: the deepest failure says most.
        first = max(exc.errors(), key=lambda error: len(error["loc"]))
        param = _param(_location(tuple(first["loc"])))
        if first["type"] == "extra_forbidden":
            raise ApiError(
                400,
                f"Unknown parameter: '{param}'.",
                param=param,
                code="unknown_parameter",
            ) from None
        raise ApiError(400, f"Invalid value for '{param}': {first['msg']}", param=param) from None


def _location(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """Pydantic's error location without its union bookkeeping: the branch names (``list[...]``,
    ``str``) and the tag a tagged union adds after a list index or ``text.format``."""
    out: list[int | str] = []
    for part in loc:
        if isinstance(part, str) and ("[" in part or part == "str"):
            continue
        after_branch = bool(out) and (isinstance(out[-1], int) or out[-1] == "format")
        if isinstance(part, str) and after_branch and part in _TAGS:
            continue
        out.append(part)
    return tuple(out)


_TAGS = frozenset(
    {
        *("message", "function_call", "function_call_output", "reasoning"),
        *("input_text", "input_image", "input_file", "output_text", "refusal"),
        *("text", "json_object", "json_schema"),
        *("function", "namespace"),
    }
)


# --- request: Responses -> chat -----------------------------------------------------------------


def _image(part: InputImage, where: str) -> dict[str, Any]:
    if not part.image_url:
        raise bad_request(
            f"{where}: an input_image needs an image_url (files are not supported)", param=where
        )
    image: dict[str, Any] = {"url": part.image_url}
    if part.detail in ("low", "high"):
        image["detail"] = part.detail
    return {"type": "image_url", "image_url": image}


def _parts(content: list[Any], where: str) -> str | list[dict[str, Any]]:
    """Content parts as chat content: one string when all are text, else text and image parts."""
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        if isinstance(part, InputText | OutputText):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, Refusal):
            parts.append({"type": "text", "text": part.refusal})
        elif isinstance(part, InputImage):
            parts.append(_image(part, at))
        else:
            raise bad_request(f"{at}: input_file is not supported", param=at)
    if all(part["type"] == "text" for part in parts):
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


def to_chat(request: ResponsesRequest, history: list[dict[str, Any]] | None = None) -> ChatRequest:
    """The chat request of ``request``; ``history``: the conversation of its previous response."""
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    messages += history or []
    input_from = len(messages)
    messages += chat_messages(request.input)
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
        param = _param(tuple(first["loc"]))
        raise bad_request(f"Invalid value for '{param}': {first['msg']}", param=param) from None


# --- stored responses: the ledger row a response id names ---------------------------------------


@dataclass
class Stored:
    """What a Response object is rendered from: a call just answered, or its ledger row."""

    id: uuid.UUID
    created_at: float
    model: str
    request: dict[str, Any]  # the chat request (routing/protocol.py) as the ledger stores it
    response: dict[str, Any] | None  # {"message", "finish_reason"}
    usage: dict[str, int]
    status_code: int = 200
    error: str = ""

    @property
    def response_id(self) -> str:
        return f"{ID_PREFIX}{self.id.hex}"


def usage_of(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def chat_usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    usage = usage or {}
    details = usage.get("prompt_tokens_details") or {}
    out_details = usage.get("completion_tokens_details") or {}
    return usage_of(
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        int(details.get("cached_tokens") or 0),
        int(out_details.get("reasoning_tokens") or 0),
    )


def served_leg_usage(legs: list[dict[str, Any]], served_by: str) -> dict[str, Any]:
    """The tokens of the leg that answered (a failed student leg before it is billed, not shown)."""
    served = [leg for leg in legs if leg.get("role") == served_by and not leg.get("error")]
    leg = served[-1] if served else {}
    return usage_of(
        int(leg.get("prompt_tokens") or 0),
        int(leg.get("completion_tokens") or 0),
        int(leg.get("cached_tokens") or 0),
    )


def facts_of(request: dict[str, Any]) -> dict[str, Any] | None:
    """The Responses-only facts of a stored chat request; None for a call made on another API."""
    metadata = request.get("metadata")
    facts = metadata.get(RESERVED) if isinstance(metadata, dict) else None
    return facts if isinstance(facts, dict) else None


def response_uuid(response_id: str) -> uuid.UUID | None:
    if not response_id.startswith(ID_PREFIX):
        return None
    digits = response_id.removeprefix(ID_PREFIX)
    if len(digits) != 32:
        return None
    try:
        return uuid.UUID(hex=digits)
    except ValueError:
        return None


def _created(value: Any) -> float:
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when.timestamp() if isinstance(when, datetime) else time.time()


def _row(invocation_id: uuid.UUID) -> dict[str, Any] | None:
    """The ledger row as a dict: this process's uncommitted one (read-your-writes), else the database's."""
    pending = ledger_writer.pending_row(str(invocation_id))
    if pending is not None:
        return {name: pending.get(name) for name in ROW_FIELDS}
    return Invocation.objects.filter(pk=invocation_id).values(*ROW_FIELDS).first()


class Gone(Exception):
    """A response that exists no longer or never did for this key; ``message`` says which."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def find(response_id: str, api_key_id: int) -> Stored:
    """The stored response ``response_id`` of key ``api_key_id``; raises ``Gone``.

    Another key's response, a call made on another API, a ``store: false`` response and a deleted one
    are all "not found" (as OpenAI answers); one whose bodies the retention purge blanked says so.
    """
    not_found = Gone(f"Response with id '{response_id}' not found.")
    invocation_id = response_uuid(response_id)
    row = _row(invocation_id) if invocation_id is not None else None
    if row is None or row["api_key_id"] != api_key_id:
        raise not_found
    request = row["request"] or {}
    if request.get("deleted"):
        raise not_found
    if request.get("purged"):
        raise Gone(
            f"Response with id '{response_id}' is no longer stored: its content was purged after the "
            "ledger's retention period (LEDGER_RETENTION_DAYS)."
        )
    if not has_body(request):
        raise Gone(f"Response with id '{response_id}' is not stored: this gateway keeps no bodies.")
    facts = facts_of(request)
    if facts is None or facts.get("store") is False:
        raise not_found
    return Stored(
        id=uuid.UUID(str(row["id"])),
        created_at=_created(row["created_at"]),
        model=row["requested_model"],
        request=request,
        response=row["response"],
        usage=served_leg_usage(row["legs"] or [], row["served_by"]),
        status_code=row["status_code"],
        error=row["error"] or "",
    )


def history(stored: Stored) -> list[dict[str, Any]]:
    """The conversation of a stored response in chat form, its answer last, without its
    ``instructions`` (which, as OpenAI's, do not carry over to the next response)."""
    messages = list(stored.request["messages"])
    facts = facts_of(stored.request) or {}
    if facts.get("instructions") and messages and messages[0].get("role") == "system":
        messages = messages[1:]
    message = (stored.response or {}).get("message")
    if stored.status_code != 200 or not isinstance(message, dict):
        raise bad_request(
            f"Previous response with id '{stored.response_id}' failed; it cannot be continued.",
            param="previous_response_id",
        )
    answer: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        answer["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {
                    "name": (call.get("function") or {}).get("name", ""),
                    "arguments": (call.get("function") or {}).get("arguments", ""),
                },
            }
            for call in message["tool_calls"]
        ]
    return [*messages, answer]


def delete(response_id: str, api_key_id: int) -> None:
    """Blanks the stored bodies of a response (as the retention purge does: the row, its costs and
    tokens stay); raises ``Gone`` where ``find`` would."""
    invocation_id = find(response_id, api_key_id).id
    if ledger_writer.pending_row(str(invocation_id)) is not None:
        ledger_writer.flush()  # answered by this process moments ago: commit it first
    with transaction.atomic():
        row = Invocation.objects.select_for_update().filter(pk=invocation_id).only("request").first()
        if row is None:  # committed by nobody (the writer failed): nothing stored to delete
            raise Gone(f"Response with id '{response_id}' not found.")
        blanked = {"purged": True, "deleted": True, **request_stub(row.request or {})}
        # update(), not save(): None is SQL NULL here, as in ledger.ledger_bodies_purge.
        Invocation.objects.filter(pk=invocation_id).update(request=blanked, response=None)


# --- input items: GET /v1/responses/{id}/input_items --------------------------------------------


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


# --- response: chat -> Responses ----------------------------------------------------------------


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
