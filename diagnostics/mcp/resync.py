"""Re-classifying a server when a call found one of its tools changed, off every shared thread.

The gateway's edge (app/mcp/) runs on the event loop and reaches the database through ``sync_to_async``;
a blocking re-list there held the one thread that the ``/v1`` edge also uses, so a slow upstream stalled
everyone's calls. Here the re-list is awaited on the event loop (bounded by the server's ``timeout_s``)
and the database writes run on this module's own small pool; a server is re-listed at most once per
``MIN_INTERVAL_S`` and never twice at once, so an upstream that changes on every call cannot make
Skillgate re-list it on every call. The diagnosis worker (a thread of its own) uses :func:`resync`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.db import connection

from diagnostics.mcp.client import UpstreamError, list_tools_async
from diagnostics.mcp.selectors import upstream_of_async
from diagnostics.mcp.servers import SyncReport, mcp_server_apply, mcp_server_sync, mcp_server_sync_failed
from diagnostics.models import McpServer

MIN_INTERVAL_S = 30.0
POOL_THREADS = 2

T = TypeVar("T")

_lock = threading.Lock()
_running: set[str] = set()
_last: dict[str, float] = {}
_pool: list[ThreadPoolExecutor] = []


def _executor() -> ThreadPoolExecutor:
    with _lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(max_workers=POOL_THREADS, thread_name_prefix="mcp-resync"))
        return _pool[0]


def _key(server: McpServer) -> str:
    return f"{server.pk}:{server.created_at.isoformat()}"  # a server re-registered under a name is another


def _claim(name: str) -> bool:
    """Whether this caller re-lists ``name`` now (not already running, not re-listed lately)."""
    with _lock:
        now = time.monotonic()
        if name in _running or now - _last.get(name, -MIN_INTERVAL_S) < MIN_INTERVAL_S:
            return False
        _running.add(name)
        return True


def _release(name: str) -> None:
    with _lock:
        _running.discard(name)
        _last[name] = time.monotonic()


def _closing(work: Callable[[], T]) -> Callable[[], T]:
    def run() -> T:
        try:
            return work()
        finally:
            connection.close()  # a pool thread keeps no database connection between jobs

    return run


async def on_pool(work: Callable[[], T]) -> T:
    """Runs ``work`` (database reads and writes) on this module's pool, never on Django's shared thread."""
    return await sync_to_async(_closing(work), thread_sensitive=False, executor=_executor())()


async def sync_async(server: McpServer) -> SyncReport:
    """An operator's sync (``POST /api/mcp/servers/{server}/sync``): the listing awaited on the event loop
    (bounded by the server's ``timeout_s``), the writes on this module's pool; never skipped."""
    try:
        listing = await list_tools_async(await upstream_of_async(server))
    except UpstreamError as exc:
        error = str(exc)
        await on_pool(lambda: mcp_server_sync_failed(server=server, error=error))
        return SyncReport(error=error)
    return await on_pool(lambda: mcp_server_apply(server=server, listing=listing))


async def resync_async(server: McpServer) -> bool:
    """Re-lists and re-classifies ``server`` without holding a shared thread; False when skipped."""
    key = _key(server)
    if not _claim(key):
        return False
    try:
        try:
            listing = await list_tools_async(await upstream_of_async(server))
        except UpstreamError as exc:
            error = str(exc)
            failed = _closing(lambda: mcp_server_sync_failed(server=server, error=error))
            await sync_to_async(failed, thread_sensitive=False, executor=_executor())()
            return True
        apply = _closing(lambda: mcp_server_apply(server=server, listing=listing))
        await sync_to_async(apply, thread_sensitive=False, executor=_executor())()
        return True
    finally:
        _release(key)


def resync(server_name: str) -> bool:
    """The same from a thread of one's own (the diagnosis worker); False when skipped."""
    server = McpServer.objects.filter(name=server_name).first()
    if server is None or not _claim(_key(server)):
        return False
    try:
        mcp_server_sync(server=server)
        return True
    finally:
        _release(_key(server))
