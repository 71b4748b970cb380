"""Load shedding: at most ``SKILLGATE_MAX_IN_FLIGHT`` LLM calls (chat completions, Messages, Responses,
embeddings) in flight per server process (0: no limit), checked in front of the edge (app/asgi.py) so a
refused call costs almost nothing.

Only a caller with a valid key takes a place: the key is in the headers, so it is checked first, before
the body is read (a 401 or 403 in the endpoint's error convention, the connection closed, the body never
read). Without that, connections with no key that sent headers and never finished their bodies held every
place (issue 37); app/edge.py now also gives every body a deadline (a 408). The key found is handed to the
handler in the scope (``routing/api/http.py``'s ``Request.api_key``), so it is not looked up twice.

Past the limit a call gets an immediate 503 with ``Retry-After`` (the openai SDK retries it with backoff)
and nothing is written for it. A call counts from the moment its key is known and its body has arrived
until the edge has sent its last byte (streams included) or the client went away: a keyed client that
trickles its body (up to app/edge.py's deadline) holds no place meanwhile (issue 37, round three: one
key's slow bodies held every place for the deadline's 30 s, again and again). The limit is checked
before the body is read too, so a call refused for capacity still costs almost nothing. Everything here
runs on the process's event loop, so the count needs no lock.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError

from routing import conf
from routing.api import endpoints
from routing.api.app import error_body_for
from routing.api.auth import api_key_of
from routing.api.http import API_KEY, Request, send_json, whole_body
from routing.errors import ApiError

log = logging.getLogger(__name__)

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


async def _refuse(send: Any, path: str, error: ApiError, *, close: bool) -> None:
    headers = {**error.headers, "connection": "close"} if close else error.headers
    await send_json(send, error.status, error_body_for(path)(error), headers)


async def guarded(app: ASGIApp, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Serves one call with ``app`` if its key is valid and the process has room; otherwise answers
    the 401/403 or the 503 itself, without reading the body."""
    global _in_flight
    path = scope["path"]
    try:
        key = await api_key_of(Request.of(scope), anthropic=path.startswith(endpoints.ANTHROPIC_PATHS))
    except ApiError as exc:
        await _refuse(send, path, exc, close=True)  # the body is never read: the connection ends
        return
    except DatabaseError:
        log.exception("POST %s: the database is unavailable to check the key", path)
        await _refuse(send, path, _database_unavailable(), close=True)
        return
    limit = conf.get().limits.max_in_flight
    if limit and _in_flight >= limit:
        await _refuse(send, path, _overloaded(limit), close=True)
        return
    if limit:  # the body first, holding no place (app/edge.py bounds its size and its time)
        body = await whole_body(receive)
        if body is None:
            return  # the client went away, or the edge answered its 408 or 413
        if _in_flight >= limit:
            await _refuse(send, path, _overloaded(limit), close=False)
            return
        receive = _replay(body, receive)
    _in_flight += 1
    try:
        await app({**scope, API_KEY: key}, receive, send)
    finally:
        _in_flight -= 1


def keyed_write(path: str, method: str) -> bool:
    """Whether ``method`` on ``path`` is a ``/v1`` write that is not an LLM call (counting tokens,
    cancelling a response): its key is checked before its body is read too (:func:`key_first`)."""
    if method not in ("POST", "PUT", "PATCH") or not path.startswith("/v1/") or path in CALL_PATHS:
        return False
    row = endpoints.find(path)
    return row is not None and method in row.methods


async def key_first(app: ASGIApp, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Serves a :func:`keyed_write` with ``app`` once its key is found valid from the headers; a 401 or
    403 otherwise, the body never read (round eight: before, up to 4 MB of a caller with no key was read
    into memory first). Takes no place: these are not LLM calls. The key is not handed on: a handler
    that finds it itself takes its body's turn once (routing/call/body_work.py's ``of``)."""
    path = scope["path"]
    try:
        key = await api_key_of(Request.of(scope), anthropic=path.startswith(endpoints.ANTHROPIC_PATHS))
    except ApiError as exc:
        await _refuse(send, path, exc, close=True)
        return
    except DatabaseError:
        log.exception("%s %s: the database is unavailable to check the key", scope["method"], path)
        await _refuse(send, path, _database_unavailable(), close=True)
        return
    del key  # the handler looks it up again (a cached lookup) and takes its body's turn itself
    await app(scope, receive, send)


def _replay(body: bytes, receive: Any) -> Any:
    """A ``receive`` that gives the body read already, then what the connection says next."""
    given = False

    async def again() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return dict(await receive())

    return again


def _database_unavailable() -> ApiError:
    return ApiError(
        503,
        "The gateway's database is unavailable; retry shortly.",
        type="server_error",
        code="database_unavailable",
        headers={"Retry-After": "1"},
    )
