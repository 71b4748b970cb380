"""A chat-completions stream (routing/call/streaming.py's SSE bytes) as Anthropic's Messages events:
``message_start``, then per content block ``content_block_start``, its deltas (``text_delta``,
``input_json_delta``) and ``content_block_stop``, then ``message_delta`` (stop reason, usage) and
``message_stop``. An error event of the chat stream becomes Anthropic's ``error`` event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from routing.api.messages.protocol import ERROR_TYPES, STOP_REASONS, usage_of
from routing.api.stream_translation import translate


def event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


class Translator:
    def __init__(self, message_id: str, model: str) -> None:
        self.message_id, self.model = message_id, model
        self.index = -1
        self.open: str | None = None  # "text", or "tool:<chat index>"
        self.finish_reason = "stop"
        self.usage: dict[str, Any] | None = None

    def error(self, error: dict[str, Any]) -> bytes:
        status = 504 if error.get("code") == "upstream_timeout" else 502
        body = {"type": ERROR_TYPES.get(status, "api_error"), "message": error.get("message")}
        return event("error", {"error": body})

    def start(self) -> list[bytes]:
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [event("message_start", {"message": message})]

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [event("content_block_stop", {"index": self.index})]

    def _open(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        out = self._close()
        self.index += 1
        self.open = kind
        out.append(event("content_block_start", {"index": self.index, "content_block": block}))
        return out

    def chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if self.open != "text":
                    out += self._open("text", {"type": "text", "text": ""})
                delta_body = {"type": "text_delta", "text": delta["content"]}
                out.append(event("content_block_delta", {"index": self.index, "delta": delta_body}))
            for call in delta.get("tool_calls") or []:
                kind = f"tool:{call.get('index', 0)}"
                function = call.get("function") or {}
                if self.open != kind:
                    block: dict[str, Any] = {
                        "type": "tool_use",
                        "id": call.get("id") or f"toolu_{self.message_id}_{call.get('index', 0)}",
                        "name": function.get("name") or "",
                        "input": {},
                    }
                    out += self._open(kind, block)
                if function.get("arguments"):
                    delta_body = {"type": "input_json_delta", "partial_json": function["arguments"]}
                    out.append(event("content_block_delta", {"index": self.index, "delta": delta_body}))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return out

    def end(self) -> list[bytes]:
        out = self._close()
        delta = {"stop_reason": STOP_REASONS.get(self.finish_reason, "end_turn"), "stop_sequence": None}
        usage = usage_of(self.usage)
        out.append(event("message_delta", {"delta": delta, "usage": usage}))
        out.append(event("message_stop", {}))
        return out


def anthropic_events(chat_sse: AsyncIterator[bytes], *, message_id: str, model: str) -> AsyncIterator[bytes]:
    """The events for ``chat_sse``; closing this closes the chat stream (and so the upstream)."""
    return translate(chat_sse, Translator(message_id, model))
