"""Another API's stream, read off the gateway's chat-completions stream (routing/call/streaming.py's SSE
bytes): each chunk is handed to a translator (routing/api/messages/stream.py, routing/api/responses/stream.py)
whose events are sent instead. Closing the translated stream closes the chat stream, and so the upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import orjson


class Translator(Protocol):
    def start(self) -> list[bytes]: ...
    def chunk(self, chunk: dict[str, Any]) -> list[bytes]: ...
    def error(self, error: dict[str, Any]) -> bytes: ...
    def end(self) -> list[bytes]: ...


async def translate(chat_sse: AsyncIterator[bytes], translator: Translator) -> AsyncIterator[bytes]:
    try:
        for out in translator.start():
            yield out
        async for raw in chat_sse:
            for line in raw.split(b"\n"):
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                chunk = orjson.loads(line[6:])
                if "error" in chunk:
                    yield translator.error(chunk["error"] or {})
                    return
                for out in translator.chunk(chunk):
                    yield out
        for out in translator.end():
            yield out
    finally:
        aclose = getattr(chat_sse, "aclose", None)
        if aclose is not None:
            await aclose()
