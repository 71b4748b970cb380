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
        # The events of one piece of the chat stream go out together: one write, not one per event.
        yield b"".join(translator.start())
        async for raw in chat_sse:
            out: list[bytes] = []
            for line in raw.split(b"\n"):
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                chunk = orjson.loads(line[6:])
                if "error" in chunk:
                    out.append(translator.error(chunk["error"] or {}))
                    yield b"".join(out)
                    return
                out += translator.chunk(chunk)
            if out:
                yield b"".join(out)
        yield b"".join(translator.end())
    finally:
        aclose = getattr(chat_sse, "aclose", None)
        if aclose is not None:
            await aclose()
