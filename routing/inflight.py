"""Load shedding: at most ``SKILLGATE_MAX_IN_FLIGHT`` calls in flight per server process (0: no limit).

Past a process's capacity, queued calls only grow slower until clients time out (the gateway benchmark
shows it); with a limit the extra calls get an immediate 503 OpenAI error with ``Retry-After``, which the
openai SDK retries with backoff, and nothing is written for them. A streamed call counts until its
stream ends or its response is closed (Django closes it also when the client went away first).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator

from django.conf import settings

from routing.errors import ApiError

_lock = threading.Lock()  # a response's close() may run in a worker thread
_in_flight = 0


def in_flight() -> int:
    return _in_flight


def enter() -> None:
    """Counts a call in, or raises the 503 when the process is full."""
    global _in_flight
    limit = int(settings.SKILLGATE["MAX_IN_FLIGHT"])
    with _lock:
        if not limit or _in_flight < limit:
            _in_flight += 1
            return
    raise ApiError(
        503,
        f"Skillgate is at capacity ({limit} calls in flight on this server); retry shortly.",
        type="server_error",
        code="overloaded",
        headers={"Retry-After": "1"},
    )


def leave() -> None:
    global _in_flight
    with _lock:
        _in_flight -= 1


class CountedStream:
    """A stream's body that counts its call in flight until it ends or is closed, whichever is first."""

    def __init__(self, body: AsyncIterator[bytes]) -> None:
        self._body = body
        self._open = True

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._body:
                yield chunk
        finally:
            self.close()

    def close(self) -> None:
        """Django registers it as one of the response's closers."""
        with _lock:
            was_open, self._open = self._open, False
        if was_open:
            leave()
