"""A streamed answer as the gateway reads it, whatever called the upstream (the direct client or litellm).

:class:`UpstreamStream` gives chunk dicts, or ``(chunk, data)`` events where ``data`` is the event's JSON
as the upstream sent it, one at a time or in the batches they arrived in; :class:`IdSwap` puts the
gateway's completion id into such bytes when that is safe, so a chunk passed through need not be
rebuilt (routing/call/streaming.py).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

Event = tuple[dict[str, Any], bytes | None]
Batch = list[Event]
_PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


class UpstreamStream:
    """A streamed answer being received: iterate it for chunk dicts, :meth:`events` for ``(chunk,
    data)`` where ``data`` is the event's JSON as the upstream sent it (None when the chunk was rebuilt,
    by litellm), or :meth:`batches` for the events in lists, one for each read of the upstream's body
    that completed any (what arrived together, to send on together). :meth:`aclose` hangs up on the
    upstream, which stops generating."""

    def __init__(self, batches: AsyncIterator[Batch], close: Callable[[], Awaitable[None]]) -> None:
        self._batches = batches
        self._close = close

    def batches(self) -> AsyncIterator[Batch]:
        return self._batches

    async def events(self) -> AsyncIterator[Event]:
        async for batch in self._batches:
            for event in batch:
                yield event

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[dict[str, Any]]:
        try:
            async for batch in self._batches:
                for chunk, _ in batch:
                    yield chunk
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        try:
            aclose = getattr(self._batches, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            await self._close()


class IdSwap:
    """Puts the gateway's completion id into chunks passed through as the upstream sent them.

    ``swap(data, upstream_id)`` is ``data`` with the upstream's id replaced, or None when that cannot be
    done safely (then the chunk is rebuilt): the id must be a plain token (letters, digits, ``-_.``)
    found exactly once. The quoted id matches the ``id`` field itself; anywhere else it can only match
    inside a string ending in an escaped quote and the id, which makes two occurrences, so no swap."""

    def __init__(self, ours: str) -> None:
        self._ours = orjson.dumps(ours)
        self._id: Any = None
        self._needle: bytes | None = None

    def swap(self, data: bytes, upstream_id: Any) -> bytes | None:
        if upstream_id != self._id:
            self._id = upstream_id
            plain = isinstance(upstream_id, str) and _PLAIN_ID.fullmatch(upstream_id) is not None
            self._needle = b'"' + upstream_id.encode() + b'"' if plain else None
        if self._needle is None or data.count(self._needle) != 1:
            return None
        return data.replace(self._needle, self._ours)
