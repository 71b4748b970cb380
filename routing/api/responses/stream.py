"""A chat-completions stream (routing/call/streaming.py's SSE bytes) as the Responses API's typed events.

``response.created`` and ``response.in_progress`` (the response without output), then per output item
``response.output_item.added``, its parts and deltas (a message: ``response.content_part.added``,
``response.output_text.delta``..., ``response.output_text.done``, ``response.content_part.done``; a
function call: ``response.function_call_arguments.delta``..., ``response.function_call_arguments.done``)
and ``response.output_item.done``; last ``response.completed`` (``response.incomplete`` when cut off by
the token cap) with the whole response, as ``GET /v1/responses/{id}`` returns it. Every event carries
its ``sequence_number``. An error in the chat stream becomes an ``error`` event and ends the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson

from routing.api.responses.render import call_item, message_item, message_item_id, namespaces_of, response_of
from routing.api.responses.store import Stored, chat_usage
from routing.api.stream_translation import translate
from routing.call.streaming import Accumulator


class Translator:
    def __init__(self, stored: Stored) -> None:
        self.stored = stored
        self.response_id = stored.response_id
        self.sequence = 0
        self.output_index = -1
        self.open: str | None = None  # "text", or "tool:<chat index>"
        self.text: list[str] = []
        self.call: dict[str, Any] = {}
        self.acc = Accumulator()
        self.namespaces = namespaces_of(stored.request)

    def event(self, kind: str, data: dict[str, Any]) -> bytes:
        body = {"type": kind, **data, "sequence_number": self.sequence}
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n"

    def start(self) -> list[bytes]:
        skeleton = response_of(self.stored, status="in_progress")
        return [
            self.event("response.created", {"response": skeleton}),
            self.event("response.in_progress", {"response": skeleton}),
        ]

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        at = {"output_index": self.output_index}
        if self.open == "text":
            text = "".join(self.text)
            item = message_item(self.response_id, text)
            part = item["content"][0]
            where = {"item_id": item["id"], **at, "content_index": 0}
            out = [
                self.event("response.output_text.done", {**where, "text": text, "logprobs": []}),
                self.event("response.content_part.done", {**where, "part": part}),
            ]
        else:
            index = int(self.open.removeprefix("tool:"))
            item = call_item(self.response_id, index, self.call, namespaces=self.namespaces)
            done = {"item_id": item["id"], **at, "name": item["name"], "arguments": item["arguments"]}
            out = [self.event("response.function_call_arguments.done", done)]
        out.append(self.event("response.output_item.done", {**at, "item": item}))
        self.open = None
        return out

    def _open_text(self) -> list[bytes]:
        out = self._close()
        self.output_index += 1
        self.open = "text"
        self.text = []
        item = message_item(self.response_id, "", status="in_progress")
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        at = {"output_index": self.output_index}
        out.append(self.event("response.output_item.added", {**at, "item": item}))
        where = {"item_id": item["id"], **at, "content_index": 0}
        out.append(self.event("response.content_part.added", {**where, "part": part}))
        return out

    def _open_call(self, index: int, call: dict[str, Any]) -> list[bytes]:
        out = self._close()
        self.output_index += 1
        self.open = f"tool:{index}"
        function = call.get("function") or {}
        self.call = {"id": call.get("id"), "function": {"name": function.get("name") or "", "arguments": ""}}
        item = call_item(self.response_id, index, self.call, "in_progress", self.namespaces)
        out.append(
            self.event("response.output_item.added", {"output_index": self.output_index, "item": item})
        )
        return out

    def chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        self.acc.add(chunk)
        out: list[bytes] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if self.open != "text":
                    out += self._open_text()
                self.text.append(delta["content"])
                where = {"item_id": message_item_id(self.response_id), "output_index": self.output_index}
                body = {**where, "content_index": 0, "delta": delta["content"], "logprobs": []}
                out.append(self.event("response.output_text.delta", body))
            for call in delta.get("tool_calls") or []:
                index = int(call.get("index", 0))
                if self.open != f"tool:{index}":
                    out += self._open_call(index, call)
                function = call.get("function") or {}
                if function.get("name") and not self.call["function"]["name"]:
                    self.call["function"]["name"] = function["name"]
                self.call["id"] = self.call["id"] or call.get("id")
                if function.get("arguments"):
                    self.call["function"]["arguments"] += function["arguments"]
                    body = {
                        "item_id": call_item(self.response_id, index, self.call)["id"],
                        "output_index": self.output_index,
                        "delta": function["arguments"],
                    }
                    out.append(self.event("response.function_call_arguments.delta", body))
        return out

    def end(self) -> list[bytes]:
        out = self._close()
        answer = {"message": self.acc.message(), "finish_reason": self.acc.finish_reason}
        final = response_of(replace(self.stored, response=answer, usage=chat_usage(self.acc.usage)))
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        out.append(self.event(kind, {"response": final}))
        return out

    def error(self, error: dict[str, Any]) -> bytes:
        code = error.get("code") or "server_error"
        message = error.get("message") or "The upstream stream failed."
        body = {"type": "server_error", "code": code, "message": message, "param": None}
        return self.event("error", {"code": code, "message": message, "param": None, "error": body})


def response_events(chat_sse: AsyncIterator[bytes], *, stored: Stored) -> AsyncIterator[bytes]:
    """The events for ``chat_sse``; closing this closes the chat stream (and so the upstream)."""
    return translate(chat_sse, Translator(stored))
