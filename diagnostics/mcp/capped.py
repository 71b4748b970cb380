"""An httpx transport that refuses a response body past a byte cap, for the ``mcp`` SDK's HTTP client.

The SDK reads a plain JSON answer whole (``response.aread()``) before it parses it, so a bound on the
answer has to sit under the SDK: :class:`CappedTransport` wraps httpx's own transport and hands back
each response with its body stream counted as it arrives. Past ``cap`` bytes (or at once, when the
``Content-Length`` says so) the stream raises :class:`BodyTooLarge`, an ``httpx2.StreamError``, which
the SDK turns into a JSON-RPC error for the pending request (a parse error for a JSON answer, an
abandoned request for an event stream); ``refused`` tells the caller why, so it can say ``too_large``.

Requests ask for ``Accept-Encoding: identity``: the cap counts the bytes on the wire, so a compressed
answer would decompress past it; one that comes compressed anyway is refused the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2


class BodyTooLarge(httpx2.StreamError):
    """A response body passed the cap (or came compressed); nothing past the cap was read."""


class _CountedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, owner: CappedTransport) -> None:
        self._inner = inner
        self._owner = owner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            self._owner.bytes_read += len(chunk)
            if seen > self._owner.cap:
                self._owner.refuse()
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """httpx's default transport with every response body bounded by ``cap`` bytes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.refused = False
        self.bytes_read = 0  # all response bodies of this transport, as read off the wire
        self.first_status: int | None = None  # the first response's status (an older SSE server: 405)
        self._inner = httpx2.AsyncHTTPTransport()

    def refuse(self) -> None:
        self.refused = True
        raise BodyTooLarge(f"the answer passed {self.cap} bytes and was refused")

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        if self.first_status is None:
            self.first_status = response.status_code
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        length = response.headers.get("Content-Length", "")
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        if encoding != "identity" or (length.isdigit() and int(length) > self.cap):
            await response.stream.aclose()  # the connection goes, its body unread
            response.stream = _Refused(self)
            return response
        response.stream = _CountedStream(response.stream, self)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Refused(httpx2.AsyncByteStream):
    """The body of a response refused from its headers: reading it raises at once."""

    def __init__(self, owner: CappedTransport) -> None:
        self._owner = owner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self._owner.refuse()
        yield b""  # pragma: no cover
