"""The lean edge: every path under ``/v1`` served on raw ASGI, in front of Django (app/asgi.py).

It shares the models and services with the rest of the service but not Django's request cycle. A
route is a row of the endpoint table (routing/api/endpoints.py); anything else under ``/v1`` gets
OpenAI's JSON error, 404 for an unknown path and 405 (with ``Allow``) for a wrong method, never Django's
HTML page. An error no handler expected is logged and answered as a JSON 500 (the ledger code writes its
own row first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import DatabaseError

from core.paths import canonical_path
from routing import conf
from routing.api import endpoints
from routing.api.http import (
    ClientGone,
    JsonResponse,
    Receive,
    Request,
    Scope,
    Send,
    read_body,
    send_json,
    send_stream,
)
from routing.api.messages import protocol as anthropic
from routing.call import body_work
from routing.errors import ApiError

log = logging.getLogger(__name__)

ErrorBody = Callable[[ApiError], dict[str, object]]

PREFIX = "/v1"


def error_body_for(path: str) -> ErrorBody:
    if path.startswith(endpoints.ANTHROPIC_PATHS):
        return anthropic.error_body
    return ApiError.body


def not_found(method: str, path: str) -> ApiError:
    return ApiError(404, f"Invalid URL ({method} {path})", code="unknown_url")


def method_not_allowed(method: str, allowed: list[str]) -> ApiError:
    return ApiError(
        405,
        f"Method {method} is not allowed here; use {', '.join(allowed)}.",
        code="method_not_allowed",
        headers={"Allow": ", ".join(allowed)},
    )


def resolve(method: str, path: str) -> endpoints.Handler:
    path = canonical_path(path)  # app/asgi.py gave the canonical path already; direct callers too
    row = endpoints.find(path)
    if row is None:
        raise not_found(method, path)
    handler = row.methods.get(method)
    if handler is None:
        raise method_not_allowed(method, sorted(row.methods))
    return handler


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI app for ``/v1`` (HTTP scopes only; app/asgi.py sends everything else to Django)."""
    method, path = scope["method"], scope["path"]
    error_body = error_body_for(path)
    try:
        handler = resolve(method, path)
        body = b""
        if method in ("POST", "PUT", "PATCH"):
            body = await read_body(receive, conf.get().limits.max_body_bytes)
        request = Request.of(scope, body)
        async with body_work.of(request):  # a heavy body waits for its turn; released once planned
            response = await handler(request)
    except ClientGone:
        return
    except ApiError as exc:
        await send_json(send, exc.status, error_body(exc), exc.headers)
        return
    except DatabaseError:
        log.exception("%s %s: the database is unavailable", method, path)
        unavailable = ApiError(
            503,
            "The gateway's database is unavailable; retry shortly.",
            type="server_error",
            code="database_unavailable",
            headers={"Retry-After": "1"},
        )
        await send_json(send, unavailable.status, error_body(unavailable), unavailable.headers)
        return
    except Exception:
        log.exception("%s %s failed", method, path)
        failed = ApiError(500, "The gateway failed on this request.", type="server_error")
        await send_json(send, failed.status, error_body(failed))
        return
    if isinstance(response, JsonResponse):
        await send_json(send, response.status, response.payload, response.headers)
    else:
        await send_stream(send, receive, response)
