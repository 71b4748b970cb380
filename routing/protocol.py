"""The OpenAI chat-completions request, parsed and validated with pydantic.

Unknown OpenAI parameters (top_p, stop, seed, ...) are kept and passed upstream; known ones are
type-checked so a bad field is named in a 400 instead of failing later.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from routing.errors import ApiError, bad_request


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"]
    function: FunctionDef


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None

    @field_validator("n")
    @classmethod
    def _only_one_choice(cls, value: int | None) -> int | None:
        if value not in (None, 1):
            raise ValueError("only n=1 is supported")
        return value

    @field_validator("response_format")
    @classmethod
    def _known_response_format(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type") not in ("text", "json_object", "json_schema"):
            raise ValueError("type must be one of text, json_object, json_schema")
        return value

    def output_cap(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default

    def upstream_body(self, *, max_tokens: int) -> dict[str, Any]:
        """The body sent to a backend: the client's parameters without gateway-only fields."""
        body = self.model_dump(exclude_none=True, exclude={"model", "metadata", "stream", "stream_options"})
        body.pop("max_completion_tokens", None)
        body["max_tokens"] = max_tokens
        return body


def _param_name(loc: tuple[int | str, ...]) -> str:
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name


def parse_chat_request(raw: bytes) -> ChatRequest:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"Request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request("Request body must be a JSON object.", code="invalid_json")
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = _param_name(tuple(first["loc"]))
        raise ApiError(400, f"Invalid value for '{param}': {first['msg']}", param=param) from None
