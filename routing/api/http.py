"""The few pieces of HTTP the lean edge needs on raw ASGI: the request, JSON and SSE responses.

No Django request cycle: no HttpRequest, no middleware, no request signals (whose sync receivers cost two
thread hops per request), no URL resolver. Bodies are JSON rendered with orjson.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from core.money import money_json
from routing.call.pieces import Last, Whole
from routing.errors import ApiError
from routing.ledger import CallRecord

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger(__name__)


# The scope key under which routing/api/inflight.py hands the edge the caller's key, checked before the
# body was read (an ASGI server never sets it: clients send headers, not scope keys).
API_KEY = "skillgate.api_key"


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-case; a repeated header keeps its last value
    body: bytes = b""
    query: str = ""  # the raw query string (``limit=2&order=asc``), without the ``?``
    api_key: Any = None  # the ApiKey already authenticated from these headers (inflight.py), if any

    @classmethod
    def of(cls, scope: Scope, body: bytes = b"") -> Request:
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
        }
        query = scope.get("query_string", b"").decode("latin-1")
        return cls(scope["method"], scope["path"], headers, body, query, scope.get(API_KEY))

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body. app/edge.py already cut off an upload over the limit (413), so a
    disconnect here is a client that went away or was refused: nothing to answer."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"Request body is larger than {limit} bytes.", code="request_too_large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def whole_body(receive: Receive) -> bytes | None:
    """The whole request body, or None when the client went away (or app/edge.py refused it: 413, 408)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


class ClientGone(Exception):
    """The client disconnected before its request was read."""


@dataclass
class JsonResponse:
    payload: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamResponse:
    """Server-Sent Events: ``body`` yields the encoded events."""

    body: AsyncIterator[bytes]
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 200


Response = JsonResponse | StreamResponse


def call_headers(record: CallRecord) -> dict[str, str]:
    """The x-skillgate-* headers of an answered call (README, *Calling it*)."""
    return {
        "x-skillgate-route": record.route,
        "x-skillgate-served-by": record.served_by,
        "x-skillgate-verdict": record.verdict,
        "x-skillgate-fallback": "true" if record.fallback else "false",
        "x-skillgate-overhead-ms": f"{record.overhead_ms:.2f}",
        "x-skillgate-cost-usd": money_json(record.cost_usd) or "",
        "x-skillgate-invocation": str(record.id),
        **({"x-skillgate-cache-write": record.cache_write} if record.cache_write else {}),
    }


def _header_list(content_type: bytes, headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    out = [(b"content-type", content_type)]
    out += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    return out


async def send_json(send: Send, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
    body = orjson.dumps(payload)
    head = _header_list(b"application/json", headers or {})
    head.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: ApiError) -> None:
    await send_json(send, error.status, error.body(), error.headers)


# The head every stream has, encoded once.
_STREAM_HEAD = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


async def send_stream(send: Send, receive: Receive, response: StreamResponse) -> None:
    """Sends the events as they come, each piece of the body in one write; a :class:`Last` piece ends
    the response in its own write. A client that hangs up cancels the sending at once (a watcher
    reads the disconnect), and the body generator is closed, so its clean-up (hanging up on the
    upstream, writing the ledger row) runs now, not when the garbage collector finds it. A
    :class:`Whole` body is the head and one write, with nothing to watch or close."""
    head = _STREAM_HEAD + [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.headers.items()
    ]
    body = response.body
    if isinstance(body, Whole):
        head.append((b"content-length", b"%d" % len(body.piece)))
        with contextlib.suppress(OSError):  # the transport broke under a send: the client is gone
            await send({"type": "http.response.start", "status": response.status, "headers": head})
            await send({"type": "http.response.body", "body": body.piece})
        return
    sender = asyncio.current_task()
    assert sender is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        sender.cancel()

    watcher = asyncio.create_task(watch())
    try:
        await send({"type": "http.response.start", "status": response.status, "headers": head})
        async for event in body:
            if type(event) is Last:
                await send({"type": "http.response.body", "body": event})
                break
            await send({"type": "http.response.body", "body": event, "more_body": True})
        else:
            await send({"type": "http.response.body", "body": b""})
    except asyncio.CancelledError:
        if not gone:
            raise  # the server is shutting down, not a client hang-up
        sender.uncancel()
    except OSError:  # the transport broke under a send
        gone = True
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await _close(body)


async def _close(body: AsyncIterator[bytes]) -> None:
    aclose = getattr(body, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:  # its own clean-up failed; the client is gone either way
            log.exception("closing a stream body failed")
