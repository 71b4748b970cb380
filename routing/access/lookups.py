"""What every call looks up (its API key, its task profile and the backends, the profile's active
router version), cached per process.

A call needs these reads before it can go upstream; they change rarely (an operator edits a profile,
revokes a key), so each server process keeps them for ``LOOKUP_CACHE_TTL_S`` seconds. A change made in
the same process (the admin, a service) clears the cache at once through model signals; other processes
see it within the TTL. Spend and reservations are never cached: budgets are checked in SQL.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from cachetools import TTLCache
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from core.db import run_sync
from routing import conf
from routing.models import ApiKey, Backend, RouterVersion, TaskProfile

T = TypeVar("T")
_lock = threading.Lock()
_caches: dict[str, TTLCache[Any, Any]] = {}
# The loads in progress, per event loop: when an entry expires under load, the calls that miss it
# together wait for one read instead of each sending its own (a burst of identical queries every TTL).
_loading: dict[tuple[asyncio.AbstractEventLoop, str, Any], asyncio.Future[Any]] = {}
_generation = 0  # bumped by every clear: a load begun before a change does not fill the cache after it


def _cache(name: str) -> TTLCache[Any, Any] | None:
    ttl = conf.get().limits.lookup_cache_ttl_s
    if ttl <= 0:
        return None
    with _lock:
        cache = _caches.get(name)
        if cache is None or cache.ttl != ttl:
            cache = _caches[name] = TTLCache(maxsize=10_000, ttl=ttl)
        return cache


async def cached(name: str, key: Any, load: Callable[[], T | None]) -> T | None:
    """``load()`` (a database read, run off the event loop) at most once per TTL for (name, key).

    A hit costs no thread hop and no query; calls that miss together share one load. None is not
    kept: a key created a moment ago must work.
    """
    cache = _cache(name)
    if cache is None:
        return await run_sync(load)
    with _lock:
        hit = cache.get(key)
    if hit is not None:
        return hit
    loop = asyncio.get_running_loop()
    slot = (loop, name, key)
    pending = _loading.get(slot)
    if pending is None:
        pending = _loading[slot] = loop.create_task(_load(slot, cache, key, load))
        pending.add_done_callback(_retrieved)
    # Shielded: a caller that goes away does not cancel the read the others wait for.
    return await asyncio.shield(pending)


Slot = tuple[asyncio.AbstractEventLoop, str, Any]


async def _load(slot: Slot, cache: TTLCache[Any, Any], key: Any, load: Callable[[], T | None]) -> T | None:
    generation = _generation
    try:
        value = await run_sync(load)
    finally:
        if _loading.get(slot) is asyncio.current_task():  # not a newer load's (after a clear)
            _loading.pop(slot, None)
    if value is not None:
        with _lock:
            if generation == _generation:
                cache[key] = value
    return value


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Marks a failed load's exception as seen when every caller waiting for it had gone."""
    if not task.cancelled():
        task.exception()


def clear(*_: Any, **__: Any) -> None:
    """Forget everything now (this transaction's own later reads see the change) and again once the
    current transaction commits, so a call that cached the old row between this write and its commit
    does not keep it."""
    forget_all()
    transaction.on_commit(forget_all)


def forget_all() -> None:
    global _generation
    with _lock:
        _generation += 1
        for cache in _caches.values():
            cache.clear()
        _loading.clear()  # a load begun before this is not shared with the calls after it


def connect_signals() -> None:
    for model in (ApiKey, Backend, TaskProfile, RouterVersion):
        post_save.connect(clear, sender=model, dispatch_uid=f"lookups-clear-save-{model.__name__}")
        post_delete.connect(clear, sender=model, dispatch_uid=f"lookups-clear-delete-{model.__name__}")
