"""ASGI entry point. The OpenAI-compatible API under ``/v1`` is served by the lean edge
(routing/api/app.py): raw ASGI sharing the models and services, not Django's request cycle. The probes and
the Slack endpoints are served by a Django handler without the browser middleware (sessions, CSRF, auth,
messages): each sync middleware costs two thread hops per request under ASGI, and neither needs them.
Everything else (the dashboard, the operations API, the admin) is the full Django site.

Every HTTP request, whichever handler serves it, first passes the edge (app/edge.py): the client is the
socket's peer unless that is a trusted proxy (SKILLGATE_TRUSTED_PROXIES); an upload over
SKILLGATE_MAX_BODY_BYTES gets a 413 before Django reads it, and a body slower than
SKILLGATE_BODY_READ_TIMEOUT_S a 408. A request the Django handlers serve from a caller with no valid key
and no logged-in session may send 64 KB (app/anonymous.py); nothing is spooled to disk.

The lifespan (uvicorn's startup and shutdown) runs the process's ledger writer: it starts with the
process (replaying the journals of dead ones) and, at a clean stop (SIGTERM), commits every row
answered and returns the budget leases (routing/ledger/writer.py; atexit does it where there is no
lifespan)."""

import asyncio
import gc
import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "app.settings")

site = get_asgi_application()

from django.core.handlers.asgi import ASGIHandler  # noqa: E402  (after django.setup())
from django.core.handlers.exception import convert_exception_to_response  # noqa: E402

# Slack's endpoints are signed by Slack, not by a browser session, and must ack within 3 s. /metrics is
# scraped by pod address (not a host ALLOWED_HOSTS lists: CommonMiddleware would answer 400) with a
# bearer token, not a session.
API_PREFIXES = ("/healthz", "/readyz", "/slack/", "/metrics")


class ApiHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        handler: Any = self
        handler._view_middleware = []
        handler._template_response_middleware = []
        handler._exception_middleware = []
        get_response = handler._get_response_async if is_async else handler._get_response
        handler._middleware_chain = convert_exception_to_response(get_response)


api = ApiHandler()

# Import every view module now, not on the first request: a cold first request (scikit-learn, litellm)
# would take seconds, past Slack's 3-second ack deadline.
from django.urls import get_resolver  # noqa: E402

from app import anonymous  # noqa: E402
from app.edge import body_limited, trusted_forwarding  # noqa: E402
from app.mcp.edge import PREFIX as MCP_PREFIX  # noqa: E402
from app.mcp.edge import application as mcp_edge  # noqa: E402
from app.mcp.oauth import METADATA_PATH as MCP_METADATA  # noqa: E402
from core.paths import canonical_path  # noqa: E402
from routing.api import inflight  # noqa: E402
from routing.api.app import PREFIX as EDGE_PREFIX  # noqa: E402
from routing.api.app import application as edge  # noqa: E402
from routing.ledger import writer as ledger_writer  # noqa: E402

get_resolver().url_patterns  # noqa: B018

# Everything imported so far lives as long as the process: out of the cyclic GC's sight (gc.freeze), a
# full collection scans only what came after. A full collection stops every request of the process (the
# GIL is held): over the import graph (Django, litellm, scikit-learn: 378,000 objects) it took 0.66 s on
# the development machine, a stall no caller caused, which the liveness checks of issue 37 saw.
gc.collect()
gc.freeze()

# A young collection every 50,000 net allocations, not CPython's 700. What a young collection scans is the
# objects still alive, and those are the calls in flight: at 256 concurrent calls each collection walked
# 256 calls' objects and promoted them, so the older generations filled and were walked too, and the
# GC's CPU per call grew with the connections (bench harness, the server's own GC callbacks, CPU time:
# 0.05 ms at 16 connections vs 0.15-0.19 at 256 at 700; 0.00 vs 0.00-0.03 at 50,000, one collection of
# ~20 ms in ~700 calls). Per call the gateway leaves almost no cyclic garbage (~1 object), so a larger
# young generation costs no memory to speak of.
GC_THRESHOLDS = (50_000, 10, 10)
gc.set_threshold(*GC_THRESHOLDS)


async def lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await asyncio.to_thread(ledger_writer.ensure_started)
            except Exception as exc:
                await send({"type": "lifespan.startup.failed", "message": f"ledger writer: {exc}"})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await asyncio.to_thread(ledger_writer.shutdown)
            await send({"type": "lifespan.shutdown.complete"})
            return


async def dispatch(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":  # one spelling of each path for every check below (core/paths.py)
        path = canonical_path(scope["path"])
        if path != scope["path"]:
            scope = {**scope, "path": path}
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
    elif scope["type"] == "http" and scope["path"] in inflight.CALL_PATHS and scope["method"] == "POST":
        await inflight.guarded(edge, scope, receive, send)  # key first, then shed past MAX_IN_FLIGHT
    elif scope["type"] == "http" and inflight.keyed_write(scope["path"], scope["method"]):
        await inflight.key_first(edge, scope, receive, send)  # key first, the body unread without one
    elif scope["type"] == "http" and (scope["path"] == EDGE_PREFIX or scope["path"].startswith("/v1/")):
        await edge(scope, receive, send)
    elif scope["type"] == "http" and (
        scope["path"] == MCP_PREFIX
        or scope["path"].startswith((MCP_PREFIX + "/", MCP_METADATA))  # and its OAuth metadata (RFC 9728)
    ):
        await mcp_edge(scope, receive, send)  # Skillgate's MCP server and the MCP gateway (app/mcp/)
    elif scope["type"] == "http" and scope["path"].startswith(API_PREFIXES):
        await anonymous.gated(api, scope, receive, send)  # no key, no session: a small body, in memory
    else:
        await anonymous.gated(site, scope, receive, send)


application = trusted_forwarding(body_limited(dispatch))
