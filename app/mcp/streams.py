"""Bounded server-to-client event streams: ``GET`` with ``Accept: text/event-stream`` on ``/mcp`` or
``/mcp/servers/<name>``, in a live session of the caller (the Streamable HTTP transport's optional
stream), as the MCP specification allows a server to offer it:

- a stream lasts at most ``SKILLGATE_MCP_STREAM_MAX_S`` and sends at most ``SKILLGATE_MCP_STREAM_MAX_BYTES``,
  then closes cleanly (its first event names a ``retry`` delay, ``SKILLGATE_MCP_STREAM_RETRY_MS``, after
  which a client may open the next); one key (or OAuth subject) holds at most
  ``SKILLGATE_MCP_STREAMS_PER_KEY`` open streams across the endpoints and the server processes (places in
  the shared cache, as sessions hold theirs: app/mcp/sessions.py); one more is a 429;
- a comment line every ``SKILLGATE_MCP_STREAM_HEARTBEAT_S`` keeps proxies from cutting it, and each beat
  checks that the session is still live and, on the gateway, that the key's grant still stands (else it
  closes);
- on the gateway, ``notifications/tools/list_changed`` is sent when the tools the key sees change (an
  operator accepted, held, disabled or reclassified one, or the grant changed its tools): the client
  lists again. Nothing else is sent: every answer still comes on its ``POST``.

A ``GET`` without a session is a 400, without ``text/event-stream`` in ``Accept`` a 406. A stream holds no
thread: it waits on the event loop, and its checks read the cache and the database on a pool of two
threads of its own. The limits are the MCP edge's settings (app/conf.py), read when a stream opens.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from app import conf
from app.mcp import sessions

# What a watch returns: something compared between beats (a change sends list_changed), or None when
# the caller's access is gone (the stream closes).
Watch = Callable[[], Awaitable[object | None]]
GONE = None
LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


@dataclass(frozen=True)
class Limits:
    max_s: float
    heartbeat_s: float
    per_key: int
    retry_ms: int
    max_bytes: int


def current() -> Limits:
    """The stream limits now (the MCP edge's settings)."""
    edge = conf.get().mcp_edge
    return Limits(
        max_s=edge.stream_max_s,
        heartbeat_s=edge.stream_heartbeat_s,
        per_key=edge.streams_per_key,
        retry_ms=edge.stream_retry_ms,
        max_bytes=edge.stream_max_bytes,
    )


POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mcp-streams")


async def on_pool(work: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(POOL, work, *args)


def _header(scope: dict[str, Any], name: bytes) -> str:
    return next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == name), "")


async def _until_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def serve(
    where: sessions.Endpoint,
    principal: str,
    scope: dict[str, Any],
    receive: Any,
    send: Any,
    watch: Watch | None = None,
) -> None:
    """One ``GET`` of ``principal`` on ``where``: a bounded event stream, or a refusal."""
    session_id = _header(scope, sessions.SESSION_HEADER)
    if not session_id:
        await sessions.refuse(send, 400, "Bad Request: Mcp-Session-Id header is required")
        return
    if "text/event-stream" not in _header(scope, b"accept"):
        await sessions.refuse(send, 406, "Not Acceptable: the stream is text/event-stream")
        return
    if await sessions.session_principal(where, session_id) != principal:
        await sessions.refuse(send, 404, "Session not found")
        return
    limits, holder, owner = current(), f"stream:{uuid.uuid4().hex}", f"streams:{principal}"
    place = await on_pool(sessions.claim_place, owner, limits.per_key, holder, limits.max_s + 30)
    if place is None:
        message = f"This key holds {limits.per_key} open MCP event streams; end one first."
        await sessions.refuse(send, 429, message)
        return
    try:
        await _stream(where, principal, session_id, limits, receive, send, watch)
    finally:
        await on_pool(sessions.release_place, owner, place, holder)


async def _stream(
    where: sessions.Endpoint,
    principal: str,
    session_id: str,
    limits: Limits,
    receive: Any,
    send: Any,
    watch: Watch | None,
) -> None:
    headers = [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-store"),
        (b"x-accel-buffering", b"no"),
        (sessions.SESSION_HEADER, session_id.encode("latin-1")),
    ]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.max_s
    seen = await watch() if watch is not None else True
    gone = asyncio.ensure_future(_until_disconnect(receive))
    sent = 0

    async def chunk(text: str) -> bool:
        """Sends ``text`` if the stream's bytes allow it; False (send nothing) when they do not."""
        nonlocal sent
        data = text.encode()
        if sent + len(data) > limits.max_bytes:
            return False
        sent += len(data)
        await send({"type": "http.response.body", "body": data, "more_body": True})
        return True

    try:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        opening = f"retry: {limits.retry_ms}\n: skillgate: this stream closes within {limits.max_s:g} s\n\n"
        await chunk(opening)
        while seen is not GONE:
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.wait({gone}, timeout=min(limits.heartbeat_s, left))
            if gone.done():
                return  # the client went away: nothing more to send
            if await sessions.session_principal(where, session_id) != principal:
                break  # the session ended (DELETE, idle) in some process
            now = await watch() if watch is not None else True
            if now is GONE:
                break
            if now != seen:
                seen = now
                if not await chunk(f"event: message\ndata: {json.dumps(LIST_CHANGED)}\n\n"):
                    break  # its bytes are spent: the client opens the next stream and lists again
            elif not await chunk(": ping\n\n"):
                break
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except OSError:
        return  # the client disconnected while a chunk was sent
    finally:
        gone.cancel()
