"""The request body limit, enforced in front of Django (``routing.conf.get().limits.max_body_bytes``).

Django's ASGI handler reads a whole request body into a spooled file before any view runs, so a check
in a view comes too late: a 50 GB upload has been read (and written to disk) by then. Here:

- a ``Content-Length`` over the limit gets a 413 at once; the body is never read;
- a body without one (chunked) is counted as its ``http.request`` messages pass through to Django; the
  message that passes the limit is not handed on: the client gets a 413 and Django a disconnect, so it
  stops (``RequestAborted``) without having buffered more than the limit.

The 413 says ``Connection: close``, so the server drops the connection instead of reading the rest of
the upload. Its shape is the interface's: an OpenAI error under ``/v1/``, ``{"error": {"message",
"code"}}`` under ``/api/``, plain text elsewhere (the dashboard, the Slack endpoint, the probes).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from routing import conf

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CODE = "request_too_large"


def max_body_bytes() -> int:
    return conf.get().limits.max_body_bytes


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


def too_large_response(path: str, limit: int) -> tuple[str, bytes]:
    """(content type, body) of the 413 for ``path``, in that interface's error convention."""
    message = f"Request body is larger than {limit} bytes."
    if path.startswith("/v1/"):
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": CODE}
        return "application/json", json.dumps({"error": error}).encode()
    if path.startswith("/api/"):
        return "application/json", json.dumps({"error": {"message": message, "code": CODE}}).encode()
    return "text/plain; charset=utf-8", f"{message}\n".encode()


async def _refuse(scope: Scope, send: Send, limit: int) -> None:
    content_type, body = too_large_response(scope.get("path", ""), limit)
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def body_limited(app: ASGIApp) -> ASGIApp:
    """``app`` behind the body limit (HTTP only; websocket and lifespan scopes pass through)."""

    async def limited(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        limit = max_body_bytes()
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _refuse(scope, send, limit)
            return
        received = 0
        refused = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    if not started:
                        await _refuse(scope, send, limit)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 is the response; anything the app still sends is dropped
            started = True
            await send(message)

        await app(scope, counted_receive, guarded_send)

    return limited
