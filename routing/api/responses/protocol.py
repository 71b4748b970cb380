"""The Responses API request as documented: every field and item type, nothing else (``extra="forbid"``
one level down too), parsed into a 400 naming the field."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from routing.errors import ApiError, bad_request
from routing.json_body import JsonBodyError, loads_request
from routing.protocol import MAX_OUTPUT_TOKENS

RESERVED = "skillgate_response"  # the stored request's metadata key with the Responses-only facts
ID_PREFIX = "resp_"


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


def param_of(loc: tuple[int | str, ...]) -> str:
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name


def parse(raw: bytes, data: Any = None) -> ResponsesRequest:
    """``raw`` as a Responses request; ``data``: ``raw`` already parsed by ``loads_request`` (see
    ``vet_body_schemas``: a body is parsed once), or None."""
    if data is None:
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
        param = param_of(_location(tuple(first["loc"])))
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
