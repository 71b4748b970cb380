"""The MCP endpoints, in front of Django like the ``/v1`` edge (app/asgi.py routes here):

- ``/mcp``: Skillgate as an MCP server (app/mcp/skillgate.py);
- ``/mcp/servers/<name>``: the gated gateway to a registered upstream server (app/mcp/gateway.py).

Streamable HTTP through the official SDK, with sessions (``Mcp-Session-Id``: app/mcp/sessions.py):
``POST`` carries JSON-RPC and is answered with JSON, ``DELETE`` ends a session. A ``GET`` (the spec's
optional server-to-client event stream, which Skillgate has nothing to send on) is a 405 at once, as the
spec allows, so no stream is held open. Every request needs ``Authorization: Bearer <API key>``; the
key (and its owner, read fresh) is put in ``CALLER`` (app/mcp/tools.py) for the tools, which check
each tool's scope and permission themselves; the gateway's grant is looked up on every request and put
in ``GRANT``. A missing or wrong key is a 401 JSON error before the SDK sees the request.
"""

from __future__ import annotations

import json
import re
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from app.mcp import gateway, sessions, skillgate
from app.mcp.tools import CALLER, GRANT, Caller
from routing.access.keys import authenticate
from routing.models import ApiKey

PREFIX = "/mcp"
_GATEWAY = re.compile(r"^/mcp/servers/([a-z0-9]+(?:-[a-z0-9]+)*)/?$")


async def _answer(
    send: Any, status: int, message: str, code: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"error": {"message": message, "code": code}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += extra or []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _owner(key: ApiKey) -> User | None:
    if key.owner_id is None:
        return None
    owner = User.objects.filter(pk=key.owner_id, is_active=True).first()
    if owner is not None:
        owner.get_all_permissions()  # fill the cache here, in a thread, not in the event loop
    return owner


async def _caller(scope: dict[str, Any]) -> Caller | None:
    header = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"authorization"), "")
    kind, _, token = header.partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        return None
    key = await authenticate(token.strip())
    if key is None:
        return None
    return Caller(key=key, owner=await sync_to_async(_owner)(key))


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    path = scope["path"]
    gateway_match = _GATEWAY.match(path)
    if path.rstrip("/") != PREFIX and gateway_match is None:
        await _answer(send, 404, f"No MCP endpoint at {path}; use /mcp or /mcp/servers/<name>.", "not_found")
        return
    if scope.get("method", "POST") not in ("POST", "DELETE"):
        await _answer(
            send,
            405,
            "POST JSON-RPC messages to this MCP endpoint (DELETE ends a session); it offers no event "
            "stream (GET).",
            "method_not_allowed",
            [(b"allow", b"POST, DELETE")],
        )
        return
    caller = await _caller(scope)
    if caller is None:
        await _answer(
            send, 401, "Send 'Authorization: Bearer <API key>' (a Skillgate key).", "invalid_api_key"
        )
        return
    token = CALLER.set(caller)
    try:
        principal = f"key:{caller.key.pk}"
        if gateway_match is None:
            await sessions.serve(
                await sessions.endpoint("skillgate", skillgate.build), principal, scope, receive, send
            )
            return
        name = gateway_match.group(1)
        grant = await gateway.grant_of(name, caller)
        if grant is None:
            await _answer(send, 404, "No such MCP server for this key.", "not_found")
            return
        grant_token = GRANT.set(grant)
        try:
            where = await sessions.endpoint(f"gateway/{name}", lambda: gateway.build(name))
            await sessions.serve(where, principal, scope, receive, send)
        finally:
            GRANT.reset(grant_token)
    finally:
        CALLER.reset(token)
