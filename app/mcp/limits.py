"""An MCP message is bounded like a ``/v1`` body before the SDK reads it (issue 37, round three).

The SDK parses a POST's JSON-RPC message whole (``pydantic_core.from_json``), validates it into Python
objects, and hands a tool call's arguments to the tool's schema check, all on the event loop. A 3.9 MB
message of nested or wide structure (under ``SKILLGATE_MAX_BODY_BYTES``) in a tool's arguments, in
``initialize``'s params, or in a notification (answered 202 before anything looks at it) cost seconds of
the serving process, and a tool call's schema check over it did not answer within a minute.

So each POST on ``/mcp`` and ``/mcp/servers/<name>`` is read here first (app/edge.py already bounds its
bytes and its deadline) and counted at C speed (routing/json_body.py ``scan``: arrays, objects, strings
and the commas between values, and the nesting depth, with no Python loop over the body). A message
over ``SKILLGATE_MAX_JSON_ELEMENTS`` or ``SKILLGATE_MAX_JSON_DEPTH`` is a 400 JSON-RPC error naming
the limit; nothing is parsed, no tool runs and nothing is sent to an upstream server. Otherwise the SDK
gets the body as it came.

What a caller holds in the process is bounded too. The SDK answers a request when the session's
answer with its JSON-RPC id comes back; two requests with the same id in one session leave one of them
waiting until the session ends (ten minutes idle, renewed by every request), holding its coroutine
and its body, even after its client went away. So:

- one caller (a key, an OAuth subject) has at most ``SKILLGATE_MCP_MAX_IN_FLIGHT`` (32) POSTs and
  ``SKILLGATE_MCP_MAX_IN_FLIGHT_BYTES`` (16 MiB) of their bodies being answered at once in a process
  (app/conf.py ``McpEdge``, read at each POST); past either a POST is a 429 JSON-RPC error naming the
  setting;
- a POST whose client disconnects is stopped at once (its handler cancelled), so what it held is
  given back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app import conf
from routing.api.http import whole_body
from routing.json_body import limits, scan

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]

# JSON-RPC's "Invalid Request": the message is refused before it is read as one.
INVALID_REQUEST = -32600


@dataclass
class _Load:
    requests: int = 0
    bytes: int = 0


_LOADS: dict[str, _Load] = {}
_LOCK = threading.Lock()  # each server thread of a process (tests run several) has its own loop


def _admit(principal: str, size: int) -> str | None:
    """Takes a place for a POST of ``size`` bytes, or says which bound it is over."""
    edge = conf.get().mcp_edge
    max_requests, max_bytes = edge.max_in_flight, edge.max_in_flight_bytes
    with _LOCK:
        load = _LOADS.setdefault(principal, _Load())
        if load.requests >= max_requests:
            why = (
                f"{load.requests} MCP requests of this caller are being answered already, the most "
                f"allowed (SKILLGATE_MCP_MAX_IN_FLIGHT: {max_requests})"
            )
        elif load.requests and load.bytes + size > max_bytes:
            why = (
                f"this caller's MCP requests being answered hold {load.bytes} bytes; {size} more would "
                f"pass SKILLGATE_MCP_MAX_IN_FLIGHT_BYTES ({max_bytes})"
            )
        else:
            load.requests += 1
            load.bytes += size
            return None
        if not load.requests:
            _LOADS.pop(principal, None)
        return why + "; wait for an answer first."


def _release(principal: str, size: int) -> None:
    with _LOCK:
        load = _LOADS.get(principal)
        if load is None:
            return
        load.requests -= 1
        load.bytes -= size
        if load.requests <= 0:
            _LOADS.pop(principal, None)


def in_flight(principal: str) -> tuple[int, int]:
    """(requests, bytes) of ``principal`` being answered in this process."""
    with _LOCK:
        load = _LOADS.get(principal)
        return (load.requests, load.bytes) if load is not None else (0, 0)


def problem(body: bytes) -> str | None:
    """Why ``body`` is over a JSON bound (named by its setting), or None."""
    max_depth, _max_bytes, max_elements = limits()
    found = scan(body, max_elements=max_elements)
    if found.depth > max_depth:
        return (
            f"The message nests JSON at least {found.depth} levels deep; at most {max_depth} are allowed "
            "(SKILLGATE_MAX_JSON_DEPTH)."
        )
    if found.elements > max_elements:
        return (
            f"The message holds more than {max_elements} JSON elements (arrays, objects, strings and the "
            f"commas between values); at most {max_elements} are allowed (SKILLGATE_MAX_JSON_ELEMENTS)."
        )
    return None


def replay(body: bytes, gone: asyncio.Event) -> Receive:
    """A ``receive`` that gives ``body`` whole, then the disconnect once the watcher saw it."""
    given = False

    async def again() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    return again


async def refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve_bounded(
    principal: str, receive: Receive, send: Any, serve: Callable[[Receive], Awaitable[None]]
) -> None:
    """Reads the POST's body, refuses it past the bounds (400 JSON, 429 in flight), else runs
    ``serve`` with a ``receive`` that replays it, and stops ``serve`` if the client disconnects."""
    body = await whole_body(receive)
    if body is None:
        return
    why = problem(body)
    if why is not None:
        await refuse(send, 400, why)
        return
    busy = _admit(principal, len(body))
    if busy is not None:
        await refuse(send, 429, busy)
        return
    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    work = asyncio.ensure_future(serve(replay(body, gone)))
    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():  # the client went away: nobody waits for the answer
            work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        if not work.done():
            work.cancel()
        _release(principal, len(body))
