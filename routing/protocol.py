"""The OpenAI chat-completions request, parsed and validated with pydantic.

Only documented OpenAI parameters are accepted (an allow-list, ``extra="forbid"``): anything else is a
400 naming the field, as OpenAI answers an unknown parameter. So no caller can reach litellm's own
keyword arguments (``api_base``, ``base_url``, ``api_key``, ``mock_response``, ``extra_headers``,
``num_retries``, ``timeout``, ...): the upstream body is built from the parsed fields alone, and
``routing/call/upstream.py`` sets the connection arguments itself. The same holds one level down:
messages, tools and stream options accept only their documented fields.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from routing import cache_markers
from routing.errors import ApiError, bad_request
from routing.json_body import JsonBodyError, loads_request
from routing.schemas import schema_problem

# The most choices (``n``) one chat completion may ask for: each is generated, paid and verified.
MAX_CHOICES = 16
# The most output tokens a call may ask for (max_tokens, max_completion_tokens, Responses'
# max_output_tokens, Messages' max_tokens): above every model's output window, and small enough that
# the worst case of a call (tokens x price x choices) is an ordinary decimal.
MAX_OUTPUT_TOKENS = 1 << 20


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Message(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    function_call: dict[str, Any] | None = None
    refusal: str | None = None
    audio: dict[str, Any] | None = None


class FunctionDef(Strict):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _usable_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = None if value is None else schema_problem(value)
        if problem:
            raise ValueError(f"not a usable JSON schema: {problem}")
        return value


class Tool(Strict):
    type: Literal["function"]
    function: FunctionDef
    cache_control: dict[str, Any] | None = None  # a prompt-cache write (routing/cache_markers.py)


class StreamOptions(Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None


class ChatRequest(Strict):
    """Every documented parameter of ``POST /v1/chat/completions`` (OpenAI API reference, 2026)."""

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    functions: list[FunctionDef] | None = None  # deprecated by OpenAI, still documented
    function_call: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS)
    n: int | None = Field(default=None, ge=1, le=MAX_CHOICES)  # each choice verified (routing/call/legs.py)
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None  # OpenAI's range
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    service_tier: str | None = None
    store: bool | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value and not all(key.isdigit() and len(key) <= 9 for key in value):
            raise ValueError("keys must be token ids (non-negative integers)")
        return value

    @field_validator("response_format")
    @classmethod
    def _known_response_format(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type") not in ("text", "json_object", "json_schema"):
            raise ValueError("type must be one of text, json_object, json_schema")
        if value is not None and value.get("type") == "json_schema":
            spec = value.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            problem = None if schema is None else schema_problem(schema)
            if problem:
                raise ValueError(f"json_schema.schema is not a usable JSON schema: {problem}")
        return value

    @property
    def choice_count(self) -> int:
        """How many choices the caller asked for (``n``)."""
        return self.n or 1

    def output_cap(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default

    def upstream_body(self, *, max_tokens: int) -> dict[str, Any]:
        """The body sent to a backend: the client's parameters without gateway-only fields.

        ``model_dump(exclude_none=True)``'s value, but the caller's schemas (``tools``, ``functions``,
        ``response_format``) are shared, not copied: pydantic copies every container of them, 20 ms
        for a 464 KB body of tools, under the GIL (issue 37). Whoever changes the body copies what it
        changes (``prompt_cache``, ``with_skillbook``), as for the legs that share it already."""
        body = self._dump_sharing(_UPSTREAM_EXCLUDED, _UPSTREAM_EXCLUDED_SHARED)
        body.pop("max_completion_tokens", None)
        body["max_tokens"] = max_tokens
        return body

    def dump(self) -> dict[str, Any]:
        """``model_dump(exclude_none=True)``'s value with the caller's schemas shared as in
        :meth:`upstream_body`: the request the verifiers and the router read and the ledger stores
        (routing/call/plans.py). Copying them cost 10-20 ms of the serving process for a 464 KB body
        of tools, before the call was sent (issue 37, round three); the row is written from it as
        before, whole."""
        return self._dump_sharing(frozenset(), frozenset(_SHARED))

    def _dump_sharing(self, exclude: AbstractSet[str], exclude_shared: AbstractSet[str]) -> dict[str, Any]:
        if self.tools is None and self.functions is None and self.response_format is None:
            return self.model_dump(exclude_none=True, exclude=set(exclude))
        body = self.model_dump(exclude_none=True, exclude=set(exclude_shared))
        for name in _SHARED:
            if (value := getattr(self, name)) is not None:
                body[name] = value if isinstance(value, dict) else [_shallow_dump(v) for v in value]
        return {name: body[name] for name in sorted(body, key=_FIELD_RANK.__getitem__)}  # dump's order


def _shallow_dump(model: BaseModel) -> dict[str, Any]:
    """``model.model_dump(exclude_none=True)`` for a tool or function, its JSON values shared."""
    out = {name: value for name, value in model.__dict__.items() if value is not None}
    for name, value in out.items():
        if isinstance(value, BaseModel):
            out[name] = _shallow_dump(value)
    return out


# Parameters the gateway itself consumes: metadata (task profile, verifier), the stream flags (the
# gateway streams or buffers itself) and store (OpenAI's own storage of completions).
GATEWAY_ONLY = frozenset({"model", "metadata", "stream", "stream_options", "store"})
_UPSTREAM_EXCLUDED = set(GATEWAY_ONLY)
_SHARED = ("tools", "functions", "response_format")  # the caller's schemas: not copied (upstream_body)
_UPSTREAM_EXCLUDED_SHARED = _UPSTREAM_EXCLUDED.union(_SHARED)
_FIELD_RANK = {name: rank for rank, name in enumerate(ChatRequest.model_fields)}


# What may reach a backend: the OpenAI parameters of a chat completion, less the gateway's own.
UPSTREAM_FIELDS = frozenset(ChatRequest.model_fields) - GATEWAY_ONLY


def _param_name(loc: tuple[int | str, ...]) -> str:
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name


Parsed = TypeVar("Parsed", bound=BaseModel)


def parse_chat_request(raw: bytes, data: Any = None) -> ChatRequest:
    """``raw`` as a chat request (``data``: its JSON where the edge parsed it already, see
    ``vet_body_schemas``); its prompt-cache markers (a part's, a tool call's, a tool's
    ``cache_control``) checked: a malformed one is a 400 naming it."""
    request = parse_body(raw, ChatRequest, data)
    cache_markers.check(_marker_places(request))
    return request


def _marker_places(request: ChatRequest) -> dict[str, Any]:
    """What of ``request`` may hold a prompt-cache marker, in the body's shape (no copy of the rest:
    a tool's schema can be 64 KB)."""
    messages = [{"content": m.content, "tool_calls": m.tool_calls} for m in request.messages]
    tools = [{"cache_control": tool.cache_control} for tool in request.tools or ()]
    return {"messages": messages, "tools": tools}


def parse_body(raw: bytes, model: type[Parsed], data: Any = None) -> Parsed:
    """``raw`` as a JSON object validated by ``model``: a 400 in OpenAI's words naming the first bad
    or unknown field (chat completions, embeddings). ``data``: ``raw`` already parsed by
    :func:`routing.json_body.loads_request` (the body is parsed once), or None."""
    if data is None:
        try:
            data = loads_request(raw)  # bounded size, elements and nesting depth
        except JsonBodyError as exc:
            raise bad_request(exc.message, param=exc.param, code=exc.code) from None
    if not isinstance(data, dict):
        raise bad_request("Request body must be a JSON object.", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = _param_name(tuple(first["loc"]))
        if first["type"] == "extra_forbidden":
            raise ApiError(
                400,
                f"Unrecognized request argument supplied: {param}",
                param=param,
                code="unknown_parameter",
            ) from None
        raise ApiError(400, f"Invalid value for '{param}': {first['msg']}", param=param) from None
