"""What a caller who has not authenticated may make the process hold: a small body, in memory (issue 37,
class 5, round eight).

Django's ASGI handler reads a whole request body before any middleware or view runs, into a
``SpooledTemporaryFile`` that rolls over to disk past ``FILE_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MB by
default), and a multipart body's file parts went through ``TemporaryFileUploadHandler`` to disk again
once the CSRF check read ``request.POST``. So anyone who could reach the port had 4 MB bodies (the edge's
``SKILLGATE_MAX_BODY_BYTES``) written to temporary files on ``/slack/``, ``/api/``, the login page, the
dashboard and the admin before anything refused them: 150 at once took 560 MB. Now, for the requests the
Django handlers serve (app/asgi.py; ``/v1`` and ``/mcp`` check their key before reading a body already):

- the Slack endpoints, which authenticate by Slack's signature headers: a body without a well-formed
  ``X-Slack-Signature`` and an ``X-Slack-Request-Timestamp`` within Slack's five minutes of now gets the
  endpoint's 401 (``invalid_signature``) at once, the body unread (the HMAC over the body is still the
  view's to check);
- ``/api/``: a request with a body and an ``Authorization: Bearer`` key that is not a valid key gets the
  API's 401 (``invalid_api_key``) at once, the body unread;
- anything else with a body (the login form, the dashboard, the admin, ``/api/`` with no key) from a
  caller with neither a valid bearer key nor a session of a logged-in user may send at most
  :data:`ANONYMOUS_BODY_BYTES`: a larger ``Content-Length`` gets a 413 at once, a chunked body a 413 as it
  passes the bound (the app a disconnect), in the interface's convention (app/edge.py).

A caller who has authenticated is served as before, up to ``SKILLGATE_MAX_BODY_BYTES``. Nothing is
spooled to disk for anyone: app/settings/security.py keeps request bodies and uploads in memory (the edge
bounds them), with the in-memory upload handler only.
"""

from __future__ import annotations

import time
from importlib import import_module
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.http.cookie import parse_cookie

from app.edge import error_response, send_refusal, too_large_response
from routing.access.keys import authenticate

ANONYMOUS_BODY_BYTES = 64 * 1024  # a login form is a few hundred bytes
SLACK_PREFIX = "/slack/"
SLACK_WINDOW_S = 300  # Slack's (diagnostics/slack/views.py's SIGNATURE_WINDOW_S)
_SIGNATURE_LENGTH = len("v0=") + 64  # "v0=" and a hex SHA-256
_TIMESTAMP_DIGITS = 12
_HEX = frozenset(b"0123456789abcdef")

Scope = dict[str, Any]
ASGIApp = Any


def _header(scope: Scope, name: bytes) -> bytes:
    return next((value for key, value in scope.get("headers", ()) if key.lower() == name), b"")


def has_body(scope: Scope) -> bool:
    """Whether the request announced a body (a nonzero ``Content-Length``, or ``Transfer-Encoding``)."""
    for name, value in scope.get("headers", ()):
        lowered = name.lower()
        if lowered == b"transfer-encoding" or (
            lowered == b"content-length" and value.strip() not in (b"0", b"")
        ):
            return True
    return False


def slack_headers_plausible(scope: Scope, now: float | None = None) -> bool:
    """Whether Slack could have signed this request: a ``v0=`` signature of 64 hex digits, a timestamp
    of digits within :data:`SLACK_WINDOW_S` of now. Checked from the headers alone."""
    signature = _header(scope, b"x-slack-signature").strip()
    timestamp = _header(scope, b"x-slack-request-timestamp").strip()
    if not (timestamp.isdigit() and len(timestamp) <= _TIMESTAMP_DIGITS):
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > SLACK_WINDOW_S:
        return False
    return len(signature) == _SIGNATURE_LENGTH and signature.startswith(b"v0=") and set(signature[3:]) <= _HEX


def _bearer(scope: Scope) -> str | None:
    """The token of an ``Authorization: Bearer`` header ("" for an empty one), None without one."""
    header = _header(scope, b"authorization").decode("latin-1").strip()
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _session_has_user(session_key: str) -> bool:
    engine = import_module(settings.SESSION_ENGINE)
    return engine.SessionStore(session_key).get(SESSION_KEY) is not None


async def _logged_in(scope: Scope) -> bool:
    """Whether the session cookie names the session of a logged-in user."""
    cookies = parse_cookie(_header(scope, b"cookie").decode("latin-1"))
    session_key = cookies.get(settings.SESSION_COOKIE_NAME, "")
    if not session_key or len(session_key) > 64 or not session_key.isalnum():
        return False
    return bool(await sync_to_async(_session_has_user)(session_key))


async def _refuse_unsigned(send: Any) -> None:
    message = "The request is not signed by Slack."
    body = error_response("/api/", message, "invalid_signature")  # the endpoint's {"error": ...} JSON
    await send_refusal(send, 401, body)


async def _refuse_key(send: Any, path: str) -> None:
    await send_refusal(send, 401, error_response(path, "Incorrect or revoked API key.", "invalid_api_key"))


def _capped(scope: Scope, receive: Any, send: Any, limit: int) -> Any:
    """``receive`` that answers a 413 and gives the app a disconnect once the body passes ``limit``."""
    received = 0
    refused = False

    async def capped_receive() -> dict[str, Any]:
        nonlocal received, refused
        if refused:
            return {"type": "http.disconnect"}
        message = dict(await receive())
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                refused = True
                await send_refusal(send, 413, too_large_response(scope.get("path", ""), limit))
                return {"type": "http.disconnect"}
        return message

    return capped_receive


def _declared_length(scope: Scope) -> int | None:
    text = _header(scope, b"content-length").decode("latin-1").strip()
    return int(text) if text.isdigit() else None


async def gated(app: ASGIApp, scope: Scope, receive: Any, send: Any) -> None:
    """Serves ``scope`` with ``app`` (a Django handler), a caller who has not authenticated held to a
    small body and refused before any body is read where its headers already say it will be."""
    if scope["type"] != "http" or not has_body(scope):
        await app(scope, receive, send)
        return
    path = scope["path"]
    if path.startswith(SLACK_PREFIX):
        if slack_headers_plausible(scope):
            await app(scope, receive, send)
        else:
            await _refuse_unsigned(send)
        return
    token = _bearer(scope)
    if token is not None and path.startswith("/api/"):
        if token and await authenticate(token) is not None:
            await app(scope, receive, send)
        else:
            await _refuse_key(send, path)
        return
    if await _logged_in(scope):
        await app(scope, receive, send)
        return
    declared = _declared_length(scope)
    if declared is not None and declared > ANONYMOUS_BODY_BYTES:
        await send_refusal(send, 413, too_large_response(path, ANONYMOUS_BODY_BYTES))
        return
    await app(scope, _capped(scope, receive, send, ANONYMOUS_BODY_BYTES), send)
