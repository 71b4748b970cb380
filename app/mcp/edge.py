"""The MCP endpoints, in front of Django like the ``/v1`` edge (app/asgi.py routes here):

- ``/mcp``: Skillgate as an MCP server (app/mcp/skillgate.py);
- ``/mcp/servers/<name>``: the gated gateway to a registered upstream server (app/mcp/gateway.py).

Streamable HTTP through the official SDK, with sessions (``Mcp-Session-Id``: app/mcp/sessions.py):
``POST`` carries JSON-RPC and is answered with JSON, ``DELETE`` ends a session, and ``GET`` in a session
is the spec's optional server-to-client event stream, bounded (app/mcp/streams.py: a maximum duration
and number per key, heartbeats, the gateway's ``tools/list_changed``). Every request needs
``Authorization: Bearer <API key>``; the key (and its owner, read fresh) is put in ``CALLER``
(app/mcp/tools.py) for the tools, which check each tool's scope and permission themselves; the gateway's
grant is looked up on every request and put in ``GRANT``. An OAuth access token stands for a user's key
where an issuer is configured (app/mcp/oauth.py, which also serves the protected-resource metadata). A
missing or wrong bearer is a 401 JSON error, with ``WWW-Authenticate``, before the SDK sees the request.
A POST's message is then held to the ``/v1`` bounds on JSON elements and depth, and a caller's POSTs
in flight are bounded (app/mcp/limits.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from app.mcp import gateway, limits, oauth, sessions, skillgate, streams
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


def _bearer(scope: dict[str, Any]) -> str:
    header = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"authorization"), "")
    kind, _, token = header.partition(" ")
    return token.strip() if kind.lower() == "bearer" else ""


async def _caller(token: str) -> tuple[Caller, str] | None:
    """The caller a bearer stands for, and the principal its sessions belong to: a Skillgate key, else
    an OAuth access token (app/mcp/oauth.py) when an issuer is configured."""
    key = await authenticate(token)
    if key is not None:
        return Caller(key=key, owner=await sync_to_async(_owner)(key)), f"key:{key.pk}:{key.prefix}"
    return await oauth.caller_of(token)


async def _metadata(scope: dict[str, Any], send: Any) -> None:
    """RFC 9728 protected-resource metadata (GET), or a 404 while no OAuth issuer is configured."""
    found = oauth.settings()
    path = scope["path"].rstrip("/")
    inside = path.removeprefix(oauth.METADATA_PATH)  # '', '/mcp' or '/mcp/servers/<name>': one resource
    if found is None or not (inside == "" or inside == PREFIX or inside.startswith(PREFIX + "/")):
        await _answer(send, 404, "No OAuth protected-resource metadata here.", "not_found")
        return
    if scope.get("method") not in ("GET", "HEAD"):
        await _answer(send, 405, "GET the metadata.", "method_not_allowed", [(b"allow", b"GET")])
        return
    body = json.dumps(oauth.metadata(found)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    path = scope["path"]
    if path.startswith(oauth.METADATA_PATH):
        await _metadata(scope, send)
        return
    gateway_match = _GATEWAY.match(path)
    if path.rstrip("/") != PREFIX and gateway_match is None:
        await _answer(send, 404, f"No MCP endpoint at {path}; use /mcp or /mcp/servers/<name>.", "not_found")
        return
    method = scope.get("method", "POST")
    if method not in ("POST", "DELETE", "GET"):
        await _answer(
            send,
            405,
            "POST JSON-RPC messages to this MCP endpoint; DELETE ends a session, GET in a session opens "
            "its bounded event stream.",
            "method_not_allowed",
            [(b"allow", b"GET, POST, DELETE")],
        )
        return
    bearer = _bearer(scope)
    found = await _caller(bearer) if bearer else None
    if found is None:
        await _answer(
            send,
            401,
            "Send 'Authorization: Bearer <API key>' (a Skillgate key), or an OAuth access token for this "
            "resource where an issuer is configured (see WWW-Authenticate).",
            "invalid_api_key",
            [(b"www-authenticate", oauth.challenge(token_sent=bool(bearer)))],
        )
        return
    caller, principal = found
    if method == "POST":  # bounded like a /v1 body, and in flight per caller (app/mcp/limits.py)

        async def serve(bounded: Any) -> None:
            await _serve(scope, bounded, send, caller, principal, gateway_match)

        await limits.serve_bounded(principal, receive, send, serve)
        return
    await _serve(scope, receive, send, caller, principal, gateway_match)


async def _serve(
    scope: dict[str, Any],
    receive: Any,
    send: Any,
    caller: Caller,
    principal: str,
    gateway_match: re.Match[str] | None,
) -> None:
    """An authenticated request on ``/mcp`` or a registered server's gate (``gateway_match``)."""
    method = scope.get("method", "POST")
    token = CALLER.set(caller)
    try:
        if gateway_match is None:
            where = await sessions.endpoint("skillgate", skillgate.build)
            if method == "GET":
                await streams.serve(where, principal, scope, receive, send)
            else:
                await sessions.serve(where, principal, scope, receive, send)
            return
        name = gateway_match.group(1)
        grant = await gateway.grant_of(name, caller)
        if grant is None:
            await _answer(send, 404, "No such MCP server for this key.", "not_found")
            return
        grant_token = GRANT.set(grant)
        try:
            where = await sessions.endpoint(f"gateway/{name}", lambda: gateway.build(name))
            if method == "GET":
                key = caller.key

                async def watch() -> object | None:
                    return await streams.on_pool(gateway.visible_now, name, key)

                await streams.serve(where, principal, scope, receive, send, watch)
            else:
                await sessions.serve(where, principal, scope, receive, send)
        finally:
            GRANT.reset(grant_token)
    finally:
        CALLER.reset(token)
