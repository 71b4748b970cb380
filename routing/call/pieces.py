"""A streamed answer's body as routing/call hands it to the edge (routing/api/http.py ``send_stream``): an
async iterator of pieces of Server-Sent Events, each piece sent in one write. The last piece may be
marked (:class:`Last`), so it ends the response in its own write; an answer that is whole before its
head is sent is a :class:`Whole`, one piece sent with its length and nothing to wait on."""

from __future__ import annotations

from collections.abc import AsyncIterator

__all__ = ["Last", "Whole"]


class Last(bytes):
    """A stream body's last piece: sent in the write that ends the response (no empty write after it).
    A body yields nothing after it."""

    __slots__ = ()


class Whole(AsyncIterator[bytes]):
    """A stream body that is one piece, ready when the response is made (an answer replayed whole): sent
    with its length in the write after the head, and, with nothing to wait on, no hang-up watcher.
    Iterated (by a translation), it yields the piece once, as :class:`Last`."""

    __slots__ = ("_given", "piece")

    def __init__(self, piece: bytes) -> None:
        self.piece = piece
        self._given = False

    async def __anext__(self) -> bytes:
        if self._given:
            raise StopAsyncIteration
        self._given = True
        return Last(self.piece)
