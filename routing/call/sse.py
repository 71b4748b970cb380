"""Server-Sent Events as OpenAI-protocol upstreams send them: the ``data`` of each event.

:func:`data_of` reads an answer's chunks (split anywhere, CRLF or LF) and gives each event's data (its
``data:`` lines joined) until ``[DONE]``; other fields and comments are skipped. :func:`batches_of` gives
the same data grouped by the piece of the body that completed them. After ``[DONE]`` the
body is read to its end, so the connection goes back to the pool. One event larger than
``MAX_EVENT_BYTES`` raises :class:`EventTooLarge` (a hostile or broken upstream must not fill the memory).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

MAX_EVENT_BYTES = 16 * 1024 * 1024


class EventTooLarge(Exception):
    pass


def _value(line: bytes) -> bytes:
    value = line[5:]
    return value[1:] if value.startswith(b" ") else value


async def data_of(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Each event's data, one at a time (:func:`batches_of`, flattened)."""
    async for batch in batches_of(chunks):
        for data in batch:
            yield data


async def batches_of(chunks: AsyncIterator[bytes]) -> AsyncIterator[list[bytes]]:
    """The events' data as they arrive: a list for each piece of the body that ends at least one event
    (the events that came together, to be sent on together). A piece ending an event too large gives
    the events before it, then raises."""
    pending, done = b"", False
    parts: list[bytes] = []
    size = 0
    # A line arriving in many pieces is kept as its pieces and joined once its end comes: joining at
    # each piece copied the line so far every time (a 4 MB line in 1 KB pieces: 10 s of CPU).
    partial: list[bytes] = []
    partial_size = 0
    async for piece in chunks:
        if done:
            continue
        if b"\n" not in piece:
            partial.append(piece)
            partial_size += len(piece)
            if partial_size > MAX_EVENT_BYTES:
                raise EventTooLarge(f"an event over {MAX_EVENT_BYTES} bytes")
            continue
        if partial:
            piece, partial, partial_size = b"".join([*partial, piece]), [], 0
        lines = (pending + piece).split(b"\n") if pending else piece.split(b"\n")
        pending = lines.pop()
        if len(pending) > MAX_EVENT_BYTES:
            raise EventTooLarge(f"an event over {MAX_EVENT_BYTES} bytes")
        batch: list[bytes] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if parts:
                    data = parts[0] if len(parts) == 1 else b"\n".join(parts)
                    parts, size = [], 0
                    if data == b"[DONE]":
                        done = True
                        break
                    batch.append(data)
            elif line.startswith(b"data:"):
                value = _value(line)
                size += len(value)
                if size > MAX_EVENT_BYTES:
                    if batch:
                        yield batch
                    raise EventTooLarge(f"an event over {MAX_EVENT_BYTES} bytes")
                parts.append(value)
        if batch:
            yield batch
    if not done:
        pending = b"".join([pending, *partial])
        if pending.startswith(b"data:"):
            parts.append(_value(pending))
        data = b"\n".join(parts).strip()
        if data and data != b"[DONE]":
            yield [data]
