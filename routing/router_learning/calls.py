"""A call as the router sees it (messages, tools, response schema, profile), and its texts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from routing.router_learning.records import ReplayRecord

HEAD_CHARS = 4000
TAIL_CHARS = 8000


@dataclass(frozen=True)
class CallInput:
    messages: Sequence[dict[str, Any]]
    tools: Sequence[dict[str, Any]] = ()
    profile: str = ""
    has_verifier: bool = False
    turn_index: int = 0
    skillbook_matched: bool = False
    response_format: dict[str, Any] | None = None
    _texts: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_record(cls, record: ReplayRecord) -> CallInput:
        request = record.request
        return cls(
            messages=request.get("messages") or [],
            tools=request.get("tools") or [],
            profile=record.profile,
            has_verifier=record.has_verifier,
            turn_index=record.turn_index,
            skillbook_matched=record.skillbook_matched,
            response_format=request.get("response_format"),
        )

    @classmethod
    def from_call(cls, call: Any, *, skillbook_matched: bool | None = None) -> CallInput:
        """From a ``routing.router.Call`` (the gateway's view of a request and its profile)."""
        request = call.request
        matched = bool(call.profile.skillbook_text) if skillbook_matched is None else skillbook_matched
        return cls(
            messages=[m.model_dump(exclude_none=True) for m in request.messages],
            tools=[t.model_dump(exclude_none=True) for t in request.tools or []],
            profile=call.profile.name,
            has_verifier=call.has_verifier,
            turn_index=call.turn_index,
            skillbook_matched=matched,
            response_format=request.response_format,
        )

    def _text(self, name: str) -> str:
        if name not in self._texts:
            self._texts.update(_render(self))
        return self._texts[name]

    @property
    def head(self) -> str:
        """System prompt, tool signatures and response schema: what an agent repeats every turn."""
        return self._text("head")

    @property
    def conversation(self) -> str:
        return self._text("conversation")

    @property
    def last_turn(self) -> str:
        """The new input of this call: every message after the last assistant message."""
        return self._text("last_turn")


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text", "") if p.get("type") == "text" else f"[{p.get('type')}]"
            for p in content
            if isinstance(p, dict)
        ]
        return " ".join(str(p) for p in parts)
    return ""


def _message_text(message: dict[str, Any]) -> str:
    text = content_text(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = (call.get("function") or {}) if isinstance(call, dict) else {}
        text += f" call {function.get('name', '')}({function.get('arguments', '')})"
    return f"{message.get('role', '')}: {text.strip()}"


def schema_outline(schema: Any, depth: int = 0) -> str:
    if not isinstance(schema, dict) or depth > 6:
        return ""
    if schema.get("type") == "array" or "items" in schema:
        return f"[{schema_outline(schema.get('items'), depth + 1)}]"
    props = schema.get("properties")
    if isinstance(props, dict):
        return "{" + ", ".join(f"{k}{schema_outline(v, depth + 1)}" for k, v in props.items()) + "}"
    return ""


def schema_stats(schema: Any, depth: int = 0) -> tuple[int, int]:
    """(nesting depth, number of fields) of a JSON schema; objects and arrays are one level each."""
    if not isinstance(schema, dict) or depth > 12:
        return 0, 0
    if schema.get("type") == "array" or "items" in schema:
        inner_depth, inner_fields = schema_stats(schema.get("items"), depth + 1)
        return inner_depth + 1, inner_fields
    props = schema.get("properties")
    if isinstance(props, dict) and props:
        children = [schema_stats(v, depth + 1) for v in props.values()]
        return 1 + max(d for d, _ in children), len(props) + sum(f for _, f in children)
    return 0, 0


def response_schema(response_format: dict[str, Any] | None) -> Any:
    if not response_format:
        return None
    inner = response_format.get("json_schema")
    return inner.get("schema") if isinstance(inner, dict) else None


def _render(call: CallInput) -> dict[str, str]:
    system = [
        content_text(m.get("content")) for m in call.messages if m.get("role") in ("system", "developer")
    ]
    tools = []
    for tool in call.tools:
        function = tool.get("function") or {}
        outline = schema_outline(function.get("parameters"))
        tools.append(f"{function.get('name', '')}{outline}: {function.get('description') or ''}".strip())
    head = "\n".join(system)
    if tools:
        head += "\ntools: " + "; ".join(tools)
    response = response_schema(call.response_format)
    if response is not None:
        head += "\nresponse schema: " + schema_outline(response)
    rest = [m for m in call.messages if m.get("role") not in ("system", "developer")]
    last_assistant = max((i for i, m in enumerate(rest) if m.get("role") == "assistant"), default=-1)
    return {
        "head": head[:HEAD_CHARS],
        "conversation": "\n".join(_message_text(m) for m in rest)[-TAIL_CHARS:],
        "last_turn": "\n".join(_message_text(m) for m in rest[last_assistant + 1 :])[-TAIL_CHARS:],
        "system_chars": str(sum(len(s) for s in system)),
    }
