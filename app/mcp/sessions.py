"""MCP sessions (``Mcp-Session-Id``) on the ``/mcp`` endpoints, as the Streamable HTTP transport of the
MCP specification describes them, through the SDK's ``StreamableHTTPSessionManager`` (stateful):

- ``initialize`` (a POST without the header) opens a session: the answer carries ``Mcp-Session-Id``;
  every later request of the session must send it (without it, a request other than ``initialize`` is
  a 400); ``DELETE`` with it ends the session; an unknown, ended or expired id is a 404, after which a
  client opens a new session;
- a session belongs to the key (or OAuth subject) that opened it: the same id from another caller is a
  404, as if it did not exist;
- bounds: a session with no request for ``SKILLGATE_MCP_SESSION_IDLE_S`` ends; one key holds at most
  ``SKILLGATE_MCP_SESSIONS_PER_KEY`` open sessions across the endpoints (one more: a 429); an endpoint
  holds at most ``SKILLGATE_MCP_MAX_SESSIONS`` (the SDK's 503);
- no stream is held open: POSTs are answered with JSON, never an event stream, and ``GET`` (the
  optional server-to-client stream, which Skillgate has nothing to send on) is a 405 at the edge, as the
  specification allows.

One manager per endpoint (``/mcp``, and each ``/mcp/servers/<name>``) and event loop, created on its
first request and run by a task of that loop for the process's life. The per-key count reads the
manager's table of live sessions (``_server_instances``: the SDK keeps no public one; the SDK is pinned).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from app import conf

SESSION_HEADER = b"mcp-session-id"


@dataclass
class Endpoint:
    manager: StreamableHTTPSessionManager
    ready: asyncio.Event
    owners: dict[str, str] = field(default_factory=dict)  # session id -> the principal that opened it
    task: asyncio.Task[None] | None = None

    def live(self) -> set[str]:
        return set(self.manager._server_instances)  # the SDK keeps no public table of open sessions


@dataclass
class _Registry:
    loop: asyncio.AbstractEventLoop | None = None
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    opening: dict[str, int] = field(default_factory=dict)  # principal -> sessions being opened now


_REGISTRY = _Registry()


async def _run(endpoint: Endpoint) -> None:
    try:
        async with endpoint.manager.run():
            endpoint.ready.set()
            await asyncio.Event().wait()  # for the loop's life
    finally:
        endpoint.ready.set()


async def endpoint(name: str, build: Callable[[], Any]) -> Endpoint:
    """The session manager of endpoint ``name`` (its MCP server made by ``build`` on first use)."""
    loop = asyncio.get_running_loop()
    if _REGISTRY.loop is not loop:  # a new event loop (a test's server): the old managers died with theirs
        _REGISTRY.loop, _REGISTRY.endpoints, _REGISTRY.opening = loop, {}, {}
    found = _REGISTRY.endpoints.get(name)
    if found is None:
        settings = conf.get().mcp_edge
        manager = StreamableHTTPSessionManager(
            build(),
            json_response=True,
            session_idle_timeout=settings.session_idle_s,
            max_sessions=settings.max_sessions,
        )
        found = _REGISTRY.endpoints[name] = Endpoint(manager=manager, ready=asyncio.Event())
        found.task = loop.create_task(_run(found), name=f"mcp-sessions-{name}")
    await found.ready.wait()
    if found.task is not None and found.task.done():
        _REGISTRY.endpoints.pop(name, None)
        raise RuntimeError(f"the MCP session manager of {name} stopped")
    return found


def open_sessions(principal: str) -> int:
    """The sessions ``principal`` holds open across the endpoints (ended ones forgotten here)."""
    count = _REGISTRY.opening.get(principal, 0)
    for one in _REGISTRY.endpoints.values():
        live = one.live()
        for session_id in [s for s in one.owners if s not in live]:
            del one.owners[session_id]
        count += sum(1 for owner in one.owners.values() if owner == principal)
    return count


async def _refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve(where: Endpoint, principal: str, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """One POST or DELETE of ``principal`` (``key:<id>``, ``oauth:<issuer> <subject>``) on ``where``."""
    session_id = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == SESSION_HEADER), None)
    if session_id is not None:
        owner = where.owners.get(session_id)
        if owner is None or owner != principal:  # unknown here, or another caller's: it does not exist
            await _refuse(send, 404, "Session not found")
            return
        await where.manager.handle_request(scope, receive, send)
        if session_id not in where.live():
            where.owners.pop(session_id, None)
        return
    if scope.get("method") != "POST":
        await _refuse(send, 400, "Bad Request: Mcp-Session-Id header is required")
        return
    limit = conf.get().mcp_edge.sessions_per_key
    if open_sessions(principal) >= limit:
        await _refuse(
            send,
            429,
            f"This key holds {limit} open MCP sessions (SKILLGATE_MCP_SESSIONS_PER_KEY); end one first.",
        )
        return

    async def watch(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] < 400:
            issued = next(
                (v.decode("latin-1") for k, v in message.get("headers", ()) if k == SESSION_HEADER), None
            )
            if issued is not None:
                where.owners[issued] = principal
        await send(message)

    _REGISTRY.opening[principal] = _REGISTRY.opening.get(principal, 0) + 1
    try:
        await where.manager.handle_request(scope, receive, watch)
    finally:
        left = _REGISTRY.opening.get(principal, 1) - 1
        if left > 0:
            _REGISTRY.opening[principal] = left
        else:
            _REGISTRY.opening.pop(principal, None)
