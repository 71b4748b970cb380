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

**Several server processes** (app/serve.py's SO_REUSEPORT processes) share the sessions through
Django's cache (Redis where ``CACHE_URL`` is set): each session id is stored with its principal, kept
alive by each request for the idle time, and deleted by ``DELETE``. A request whose session another
process opened is checked against the store and served there statelessly (Skillgate's MCP servers keep
no state in a session beyond it); a session deleted in one process is a 404 in every one. The per-key
bound is global too: a session holds one of its key's numbered places in the store (``cache.add``, atomic
in Redis and in the local cache alike), claimed before ``initialize`` runs and kept alive, released and
expired with the session, so two processes never grant the same place. The store is read on a pool of two
threads of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
import weakref
from collections.abc import Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.core.cache import cache
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from app import conf

SESSION_HEADER = b"mcp-session-id"


@dataclass
class Endpoint:
    name: str
    server: Any
    manager: StreamableHTTPSessionManager
    ready: asyncio.Event
    owners: dict[str, str] = field(default_factory=dict)  # session id -> the principal that opened it
    task: asyncio.Task[None] | None = None

    def live(self) -> set[str]:
        return set(self.manager._server_instances)  # the SDK keeps no public table of open sessions


@dataclass
class _Registry:
    endpoints: dict[str, Endpoint] = field(default_factory=dict)


_REGISTRIES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Registry] = weakref.WeakKeyDictionary()
_STORE = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mcp-sessions")


def _registry() -> _Registry:
    """This event loop's endpoints (each server in a process has its own loop, and its own sessions)."""
    return _REGISTRIES.setdefault(asyncio.get_running_loop(), _Registry())


def _store_key(where: Endpoint, session_id: str) -> str:
    return f"mcp-session:{where.name}:{hashlib.sha256(session_id.encode()).hexdigest()}"


def _place_key(principal: str, place: int) -> str:
    return f"mcp-place:{hashlib.sha256(principal.encode()).hexdigest()}:{place}"


def claim_place(principal: str, limit: int, holder: str, ttl: float) -> int | None:
    """One of ``principal``'s ``limit`` places, claimed for ``holder`` (atomic ``add``: of two processes
    asking for the last place, one gets it); None when all are held. Blocking: run on the store's pool."""
    for place in range(limit):
        if cache.add(_place_key(principal, place), holder, ttl):
            return place
    return None


def release_place(principal: str, place: int, holder: str) -> None:
    """Frees the place if ``holder`` still holds it (an expired place may have been claimed again)."""
    key = _place_key(principal, place)
    if cache.get(key) == holder:
        cache.delete(key)


def _touch(where: Endpoint, session_id: str, record: tuple[str, int], idle: float) -> None:
    cache.touch(_store_key(where, session_id), idle)
    cache.touch(_place_key(record[0], record[1]), idle)


def _forget(where: Endpoint, session_id: str, record: tuple[str, int]) -> None:
    cache.delete(_store_key(where, session_id))
    release_place(record[0], record[1], f"{where.name}:{session_id}")


def _record(where: Endpoint, session_id: str) -> tuple[str, int] | None:
    """(principal, place) of a live session in the store, or None."""
    found = cache.get(_store_key(where, session_id))
    if isinstance(found, tuple) and len(found) == 2:
        return found[0], found[1]
    return None


async def session_principal(where: Endpoint, session_id: str) -> str | None:
    """The principal that opened ``session_id`` on ``where`` if it is live (any process), else None."""
    if not 1 <= len(session_id) <= 128:
        return None
    record = await _store(_record, where, session_id)
    return None if record is None else record[0]


async def _store(work: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(_STORE, work, *args)


async def _run(endpoint: Endpoint) -> None:
    try:
        async with endpoint.manager.run():
            endpoint.ready.set()
            await asyncio.Event().wait()  # for the loop's life
    finally:
        endpoint.ready.set()


async def endpoint(name: str, build: Callable[[], Any]) -> Endpoint:
    """The session manager of endpoint ``name`` (its MCP server made by ``build`` on first use)."""
    loop, registry = asyncio.get_running_loop(), _registry()
    found = registry.endpoints.get(name)
    if found is None:
        settings = conf.get().mcp_edge
        server = build()
        manager = StreamableHTTPSessionManager(
            server,
            json_response=True,
            session_idle_timeout=settings.session_idle_s,
            max_sessions=settings.max_sessions,
        )
        found = registry.endpoints[name] = Endpoint(name, server, manager, asyncio.Event())
        found.task = loop.create_task(_run(found), name=f"mcp-sessions-{name}")
    await found.ready.wait()
    if found.task is not None and found.task.done():
        registry.endpoints.pop(name, None)
        raise RuntimeError(f"the MCP session manager of {name} stopped")
    return found


async def refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _stateless(where: Endpoint, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A request of a session another process opened: answered by a fresh stateless transport."""
    manager = StreamableHTTPSessionManager(where.server, stateless=True, json_response=True)
    async with manager.run():
        await manager.handle_request(scope, receive, send)


async def _empty(send: Any, status: int) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


async def _in_session(
    where: Endpoint, principal: str, session_id: str, scope: dict[str, Any], receive: Any, send: Any
) -> None:
    idle = conf.get().mcp_edge.session_idle_s
    record = await _store(_record, where, session_id)
    if record is None or record[0] != principal:  # unknown, ended, expired, or another caller's
        await refuse(send, 404, "Session not found")
        return
    local = where.owners.get(session_id) == principal and session_id in where.live()
    if scope.get("method") == "DELETE":
        await _store(_forget, where, session_id, record)
        if local:
            await where.manager.handle_request(scope, receive, send)
            where.owners.pop(session_id, None)
        else:
            await _empty(send, 200)
        return
    await _store(_touch, where, session_id, record, idle)
    if local:
        await where.manager.handle_request(scope, receive, send)
        if session_id not in where.live():
            where.owners.pop(session_id, None)
            await _store(_forget, where, session_id, record)
    else:
        await _stateless(where, scope, receive, send)


async def serve(where: Endpoint, principal: str, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """One POST or DELETE of ``principal`` (``key:<id>:<prefix>``, ``oauth:<key id>:<prefix>:<subject>``; the
    key's random prefix too, so a key given a deleted key's id never inherits its sessions) on ``where``."""
    session_id = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == SESSION_HEADER), None)
    if session_id is not None:
        if not 1 <= len(session_id) <= 128:
            await refuse(send, 404, "Session not found")
            return
        await _in_session(where, principal, session_id, scope, receive, send)
        return
    if scope.get("method") != "POST":
        await refuse(send, 400, "Bad Request: Mcp-Session-Id header is required")
        return
    settings = conf.get().mcp_edge
    limit, idle = settings.sessions_per_key, settings.session_idle_s
    claim = f"opening:{uuid.uuid4().hex}"
    place = await _store(claim_place, principal, limit, claim, idle)
    if place is None:
        await refuse(
            send,
            429,
            f"This key holds {limit} open MCP sessions (SKILLGATE_MCP_SESSIONS_PER_KEY); end one first.",
        )
        return
    opened: list[str] = []

    async def watch(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = message.get("headers", ()) if message["status"] < 400 else ()
            new = next((v.decode("latin-1") for k, v in headers if k == SESSION_HEADER), None)
            if new is not None:
                where.owners[new] = principal
                opened.append(new)
                await _store(_opened, where, new, principal, place, claim, idle)  # before the client has it
            else:  # refused: the place is free again before the client reads the refusal and retries
                await _store(release_place, principal, place, claim)
        await send(message)

    try:
        await where.manager.handle_request(scope, receive, watch)
    finally:
        if not opened:
            await _store(release_place, principal, place, claim)


def _opened(where: Endpoint, session_id: str, principal: str, place: int, claim: str, idle: float) -> None:
    """The new session's record, and its place passed from the claim to the session."""
    cache.set(_store_key(where, session_id), (principal, place), idle)
    cache.set(_place_key(principal, place), f"{where.name}:{session_id}", idle)
