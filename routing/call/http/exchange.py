"""One upstream request and its answer, through the running loop's pooled session.

:func:`post` sends the request and returns once the answer's head is in: an :class:`Answer` whose body
is read whole (:meth:`Answer.body`, at most ``MAX_RESPONSE_BYTES``) or as it arrives
(:meth:`Answer.chunks`). :meth:`Answer.close` hangs up: an answer not read to its end closes its
connection (never put back in the pool half-read), so the upstream sees the client go and stops
generating; one read to its end has already gone back to the pool. A task cancelled while it waits
(the caller hung up) closes the connection the same way. Every failure below HTTP is a
:class:`~routing.call.http.failures.TransportFailure`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import aiohttp

from routing.call.http import pool
from routing.call.http.failures import ERRORS, failure, too_large

# An answer larger than this is refused (a runaway or hostile upstream must not fill the memory): the
# largest real completions (n choices of a long answer, a batch of embeddings) are a few MB.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class Answer:
    """An upstream's answer, its head read."""

    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status: int = response.status
        self.headers: Mapping[str, str] = response.headers  # case-insensitive

    @property
    def reason(self) -> str:
        return self._response.reason or ""

    async def body(self) -> bytes:
        """The whole body (then the connection goes back to the pool). Raises TransportFailure, and
        ``TooLarge`` past ``MAX_RESPONSE_BYTES`` (the connection is closed)."""
        response, limit = self._response, MAX_RESPONSE_BYTES
        try:
            length = response.content_length
            if length is not None and length <= limit:
                return await response.read()
            parts, size = [], 0
            async for piece in response.content.iter_any():
                size += len(piece)
                if size > limit:
                    response.close()
                    raise too_large(limit)
                parts.append(piece)
            response.release()
            return b"".join(parts)
        except ERRORS as exc:
            response.close()
            raise failure(exc) from exc
        except BaseException:  # cancelled (the caller hung up): never back in the pool half-read
            response.close()
            raise

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive, each read within the timeout. Raises TransportFailure."""
        try:
            async for piece in self._response.content.iter_any():
                yield piece
        except ERRORS as exc:
            self._response.close()
            raise failure(exc) from exc

    def close(self) -> None:
        """Hang up if the body is not read to its end; else nothing (the connection is back in the pool)."""
        self._response.close()


async def post(url: str, content: bytes, headers: Mapping[str, str], timeout_s: float) -> Answer:
    """POST ``content`` to ``url`` (an operator's backend URL, never a caller's) and read the answer's
    head: no redirect is followed (a 3xx is the answer). Raises TransportFailure."""
    parsed = pool.url_of(url)
    http = pool.session()
    try:
        response = await http.post(
            parsed,
            data=content,
            headers=headers,
            allow_redirects=False,
            timeout=pool.timeout_of(timeout_s),
            proxy=pool.proxy_for(parsed.origin()),
        )
    except ERRORS as exc:
        raise failure(exc) from exc
    return Answer(response)
