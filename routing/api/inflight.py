"""Load shedding: at most ``SKILLGATE_MAX_IN_FLIGHT`` LLM calls (chat completions, Messages, Responses,
embeddings) in flight per server process (0: no limit), checked in front of the edge (app/asgi.py) so a
refused call costs almost nothing.

Past the limit a call gets an immediate 503 OpenAI error with ``Retry-After`` (the openai SDK retries it
with backoff) and nothing is written for it. A call counts from the moment the ASGI server hands it over
until the edge has sent its last byte (streams included) or the client went away. Everything here runs on
the process's event loop, so the count needs no lock.
"""

from __future__ import annotations

from typing import Any

from routing import conf
from routing.api import endpoints
from routing.api.http import send_error
from routing.errors import ApiError

# Every endpoint that makes an LLM call (routing/api/endpoints.py); a GET, or counting tokens, is never shed.
CALL_PATHS = endpoints.LLM_CALL_PATHS
ASGIApp = Any

_in_flight = 0


def in_flight() -> int:
    return _in_flight


def _overloaded(limit: int) -> ApiError:
    return ApiError(
        503,
        f"Skillgate is at capacity ({limit} calls in flight on this server); retry shortly.",
        type="server_error",
        code="overloaded",
        headers={"Retry-After": "1"},
    )


async def guarded(app: ASGIApp, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Serves one chat call with ``app`` if the process has room, else answers the 503 itself."""
    global _in_flight
    limit = conf.get().limits.max_in_flight
    if limit and _in_flight >= limit:
        await send_error(send, _overloaded(limit))
        return
    _in_flight += 1
    try:
        await app(scope, receive, send)
    finally:
        _in_flight -= 1
