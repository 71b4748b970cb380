"""The request body limit, enforced in front of Django (``routing.conf.get().limits.max_body_bytes``).

Django's ASGI handler reads a whole request body into a spooled file before any view runs, so a check
in a view comes too late: a 50 GB upload has been read (and written to disk) by then. Here:

- a ``Content-Length`` over the limit gets a 413 at once; the body is never read;
- a body without one (chunked) is counted as its ``http.request`` messages pass through to Django; the
  message that passes the limit is not handed on: the client gets a 413 and Django a disconnect, so it
  stops (``RequestAborted``) without having buffered more than the limit.

An ``application/x-www-form-urlencoded`` body is bounded in its decoding cost too: Django decodes each
percent escape in Python (``urllib.parse.unquote``) before any view or authentication runs (the CSRF
check reads the form), so a body passing ``SKILLGATE_MAX_FORM_ESCAPES`` escapes as it arrives gets a
400 (``form_too_complex``) and Django a disconnect (round seven: anonymous 3.8 MB login forms of 1.3
million ``%41`` held ``GET /v1/models`` for 1.4 s, four at once).

The 413 says ``Connection: close``, so the server drops the connection instead of reading the rest of
the upload. So does any response sent before its request's body was read to the end (a 401 from the
headers, ``GET /v1/models`` with a body): uvicorn would otherwise discard the rest as it arrives, and
each arrival resets its keep-alive timer, so one byte a second held the connection forever (issue 37).

The 413's shape is the interface's: an OpenAI error under ``/v1/``, ``{"error": {"message",
"code"}}`` under ``/api/``, plain text elsewhere (the dashboard, the Slack endpoint, the probes).

The body has a deadline too (``routing.conf.get().limits.body_read_timeout_s``): a client that has
not sent its whole body that long after its headers arrived gets a 408 in the same conventions, and
the app a disconnect (issue 37: two connections that never finished their bodies held every slot).
app/serve.py gives the headers the same deadline, in the server's protocol.

The client address is the socket's peer. ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are believed
only from a proxy in ``SKILLGATE_TRUSTED_PROXIES`` (:func:`trusted_forwarding`, uvicorn's own
middleware; empty by default): otherwise anyone who can reach the port chooses the address the login
lockout counts against. From any other peer every forwarding header is removed before the app sees it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from routing import conf

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CODE = "request_too_large"
TIMEOUT_CODE = "request_timeout"

USERNAME_MAX = 150  # django.contrib.auth's User.username


def max_body_bytes() -> int:
    return conf.get().limits.max_body_bytes


def _has_body(scope: Scope) -> bool:
    """Whether the request announced a body (a nonzero ``Content-Length`` or a ``Transfer-Encoding``)."""
    for name, value in scope.get("headers", ()):
        lowered = name.lower()
        if lowered == b"transfer-encoding" or (
            lowered == b"content-length" and value.strip() not in (b"0", b"")
        ):
            return True
    return False


def _closing(message: Message) -> Message:
    """``message`` (a response start) with ``Connection: close``: its request's body is left unread."""
    headers = [(name, value) for name, value in message.get("headers", ()) if name.lower() != b"connection"]
    return {**message, "headers": [*headers, (b"connection", b"close")]}


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


def error_response(path: str, message: str, code: str) -> tuple[str, bytes]:
    """(content type, body) of an edge refusal for ``path``, in that interface's error convention."""
    if path.startswith("/v1/"):
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
        return "application/json", json.dumps({"error": error}).encode()
    if path.startswith("/api/"):
        return "application/json", json.dumps({"error": {"message": message, "code": code}}).encode()
    return "text/plain; charset=utf-8", f"{message}\n".encode()


def too_large_response(path: str, limit: int) -> tuple[str, bytes]:
    """(content type, body) of the 413 for ``path``, in that interface's error convention."""
    return error_response(path, f"Request body is larger than {limit} bytes.", CODE)


def timeout_response(path: str, timeout_s: float, what: str = "body") -> tuple[str, bytes]:
    """(content type, body) of the 408 for ``path``: its headers or body came too slowly."""
    message = f"The request {what} did not arrive within {timeout_s:g} s (SKILLGATE_BODY_READ_TIMEOUT_S)."
    return error_response(path, message, TIMEOUT_CODE)


def response_head(content_type: str, body: bytes) -> list[tuple[bytes, bytes]]:
    """The headers of an edge refusal; the connection is closed after it, the rest of it unread."""
    return [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]


async def send_refusal(send: Send, status: int, response: tuple[str, bytes]) -> None:
    content_type, body = response
    headers = response_head(content_type, body)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse(scope: Scope, send: Send, limit: int) -> None:
    await send_refusal(send, 413, too_large_response(scope.get("path", ""), limit))


FORM_CODE = "form_too_complex"
_FORM_TYPE = b"application/x-www-form-urlencoded"
_HIGH_BYTES = bytes(range(0x80, 0x100))


def _is_form(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-type":
            return value.strip().lower().startswith(_FORM_TYPE)
    return False


def form_escapes(chunk: bytes) -> int:
    """What decoding ``chunk`` of a urlencoded form costs Python, counted at C speed: its percent escapes
    and its raw non-ASCII bytes. ``urllib.parse.unquote`` (Django's ``QueryDict``) loops in Python over
    each escape, and over each run of ASCII between non-ASCII characters once a value has one escape."""
    return chunk.count(b"%") + len(chunk) - len(chunk.translate(None, _HIGH_BYTES))


def form_response(path: str, limit: int) -> tuple[str, bytes]:
    message = f"The form holds more than {limit} percent escapes (SKILLGATE_MAX_FORM_ESCAPES)."
    return error_response(path, message, FORM_CODE)


def body_limited(app: ASGIApp) -> ASGIApp:
    """``app`` behind the body limit and the body's deadline (HTTP only; websocket and lifespan scopes
    pass through)."""

    async def limited(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        limits = conf.get().limits
        limit = limits.max_body_bytes
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _refuse(scope, send, limit)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.body_read_timeout_s
        received = 0
        refused = False
        started = False
        body_done = not _has_body(scope)
        form = not body_done and _is_form(scope)
        escapes = 0

        async def counted_receive() -> Message:
            nonlocal received, refused, body_done, escapes
            if refused:
                return {"type": "http.disconnect"}
            if body_done:  # after the body: only the disconnect is left to wait for, as long as it takes
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                refused = True
                if not started:
                    path = scope.get("path", "")
                    await send_refusal(send, 408, timeout_response(path, limits.body_read_timeout_s))
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > limit:
                    refused = True
                    if not started:
                        await _refuse(scope, send, limit)
                    return {"type": "http.disconnect"}
                if form:
                    escapes += form_escapes(message.get("body", b""))
                    if escapes > limits.max_form_escapes:
                        refused = True
                        if not started:
                            path = scope.get("path", "")
                            await send_refusal(send, 400, form_response(path, limits.max_form_escapes))
                        return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 or 408 is the response; anything the app still sends is dropped
            started = True
            if message["type"] == "http.response.start" and not body_done:
                message = _closing(message)  # the rest of the body is never read: the connection ends
            await send(message)

        await app(scope, counted_receive, guarded_send)

    return limited


def socket_client(request: Any) -> str | None:
    """The client address django-axes locks out by (``AXES_CLIENT_IP_CALLABLE``): ``REMOTE_ADDR``, the
    socket's peer, or the forwarded client :func:`trusted_forwarding` put there. Never a request header:
    axes would read ``X-Real-IP`` and the like through django-ipware if that were ever installed."""
    address = request.META.get("REMOTE_ADDR")
    return address if isinstance(address, str) else None


def login_username(request: Any, credentials: dict[str, Any] | None = None) -> str | None:
    """The username django-axes counts failed logins by (``AXES_USERNAME_CALLABLE``): the one tried, at
    most as long as a username can be (``User.username``, 150). A longer one names no user, and whole it
    would not fit axes' own column: PostgreSQL refused the insert and the login page was a 500."""
    source = credentials if credentials else getattr(request, "POST", {})
    username = source.get("username") if hasattr(source, "get") else None
    return username[:USERNAME_MAX] if isinstance(username, str) else None


# Headers a proxy writes to say who the client is and how it connected. From a peer that is not a
# trusted proxy they are the client's own claims: removed before anything reads them (Django's
# SECURE_PROXY_SSL_HEADER and USE_X_FORWARDED_HOST/PORT read the raw header from any peer).
FORWARDED_HEADERS = frozenset(
    {
        b"forwarded",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-port",
        b"x-forwarded-prefix",
        b"x-forwarded-ssl",
        b"x-forwarded-scheme",
        b"x-real-ip",
        b"x-url-scheme",
        b"front-end-https",
    }
)


def _without_forwarded(scope: Scope) -> Scope:
    """``scope`` with every header of :data:`FORWARDED_HEADERS` removed (the same scope when none is)."""
    headers = scope.get("headers", ())
    if not any(name.lower() in FORWARDED_HEADERS for name, _ in headers):
        return scope
    return {**scope, "headers": [(n, v) for n, v in headers if n.lower() not in FORWARDED_HEADERS]}


def _peer_trusted(scope: Scope, middleware: Any) -> bool:
    client = scope.get("client")
    return client is not None and client[0] in middleware.trusted_hosts


def trusted_forwarding(app: ASGIApp) -> ASGIApp:
    """``app`` with the client address (and scheme) taken from ``X-Forwarded-For`` (and
    ``X-Forwarded-Proto``) only when the socket's peer is in ``SKILLGATE_TRUSTED_PROXIES`` (uvicorn's
    ProxyHeadersMiddleware: the address is the rightmost one no trusted proxy wrote). From any other peer
    (every peer, with the setting empty) the forwarding headers (:data:`FORWARDED_HEADERS`) are removed
    from the request, so nothing after this reads a client's claim of its address, scheme or host
    (round seven: with ``SECURE_PROXY_SSL_HEADER`` set as the security page advised, a client that
    reached the port directly and sent ``X-Forwarded-Proto: https`` was served as HTTPS, past
    ``SECURE_SSL_REDIRECT``). The server itself must not rewrite the client first: app/serve.py starts
    uvicorn with ``proxy_headers=False``."""
    middlewares: dict[tuple[str, ...], Any] = {}

    async def forwarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await app(scope, receive, send)
            return
        trusted = conf.get().limits.trusted_proxies
        if not trusted:
            await app(_without_forwarded(scope), receive, send)
            return
        middleware = middlewares.get(trusted)
        if middleware is None:
            proxied = ProxyHeadersMiddleware(cast(Any, app), list(trusted))
            middleware = middlewares[trusted] = cast(Any, proxied)
        if not _peer_trusted(scope, middleware):
            await app(_without_forwarded(scope), receive, send)
            return
        await middleware(scope, receive, send)

    return forwarded
