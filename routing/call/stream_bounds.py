"""How much of an upstream's stream the gateway takes (issue 37, round seven).

A whole answer is read up to ``MAX_RESPONSE_BYTES`` (routing/call/http/exchange.py), and one event of
a stream up to 16 MiB (routing/call/sse.py), but a stream as a whole had no bound: "no limit on a
whole stream that keeps arriving". An upstream that never ended its stream (broken, or hostile) was
relayed for as long as it sent, and the text of every event was kept for the ledger row: probed with a
call of ``max_tokens`` 1,000, the server relayed 2.7 GB in 25 s and its memory grew to 3 GB, linearly,
holding its place, its connection and the call all the while.

A stream is now bounded by what an honest provider may send for the call:

- its bytes, at most :data:`BASE_BYTES` (a whole answer's bound) plus :data:`BYTES_PER_TOKEN` for each
  token of the call's output cap (an event per token; OpenAI's with ``top_logprobs`` 20 is about
  3 KB);
- the text it accumulates (content, refusal, reasoning, tool names and arguments), at most
  :data:`MAX_TEXT` characters: about 16 times the longest answer the gateway lets a call ask for
  (2^20 tokens).

Past either, the stream is cut: the client gets an error event, the upstream is hung up on, and the
attempt is charged its bound, as any stream cut before its usage (routing/call/streaming.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from routing.call.events import Batch, UpstreamStream
from routing.call.http.exchange import MAX_RESPONSE_BYTES
from routing.call.openai_client import status_error
from routing.models import Backend

BASE_BYTES = MAX_RESPONSE_BYTES
BYTES_PER_TOKEN = 4096
MAX_TEXT = MAX_RESPONSE_BYTES
_TEXT_FIELDS = ("content", "refusal", "reasoning_content", "reasoning")


def output_cap(body: dict[str, Any]) -> int:
    """The output tokens the upstream body allows (the gateway always sets one; 0 if it did not)."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def byte_limit(body: dict[str, Any]) -> int:
    return BASE_BYTES + output_cap(body) * BYTES_PER_TOKEN


def _text(chunk: dict[str, Any]) -> int:
    """The characters of text ``chunk`` adds to the answer (what the ledger row will keep)."""
    size = 0
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            continue
        for name in _TEXT_FIELDS:
            value = delta.get(name)
            if isinstance(value, str):
                size += len(value)
        for call in delta.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                size += sum(
                    len(v) for v in (function.get("name"), function.get("arguments")) if isinstance(v, str)
                )
    return size


def bounded(backend: Backend, stream: UpstreamStream, body: dict[str, Any]) -> UpstreamStream:
    """``stream``, cut with an UpstreamError once it passes :func:`byte_limit` bytes or
    :data:`MAX_TEXT` characters of text."""
    limit = byte_limit(body)

    async def batches() -> AsyncIterator[Batch]:
        seen = text = 0
        async for batch in stream.batches():
            for chunk, data in batch:
                seen += len(data) if data is not None else len(orjson.dumps(chunk, default=str))
                text += _text(chunk)
            if seen > limit:
                raise status_error(
                    backend, 200, f"a stream of more than {limit} bytes for this call's output cap"
                )
            if text > MAX_TEXT:
                raise status_error(backend, 200, f"a stream of more than {MAX_TEXT} characters of text")
            yield batch

    return UpstreamStream(batches(), stream.aclose)
