"""What every call looks up (its API key, its task profile and the backends, the profile's active
router version), cached per process.

A call needs these reads before it can go upstream; they change rarely (an operator edits a profile,
revokes a key), so each server process keeps them for ``LOOKUP_CACHE_TTL_S`` seconds. A change made in
the same process (the admin, a service) clears the cache at once through model signals; other processes
see it within the TTL. Spend and reservations are never cached: budgets are checked in SQL.
"""

from __future__ import annotations

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

    A hit costs no thread hop and no query. None is not kept: a key created a moment ago must work.
    """
    cache = _cache(name)
    if cache is not None:
        with _lock:
            hit = cache.get(key)
        if hit is not None:
            return hit
    value = await run_sync(load)
    if value is not None and cache is not None:
        with _lock:
            cache[key] = value
    return value


def clear(*_: Any, **__: Any) -> None:
    """Forget everything now (this transaction's own later reads see the change) and again once the
    current transaction commits, so a call that cached the old row between this write and its commit
    does not keep it."""
    forget_all()
    transaction.on_commit(forget_all)


def forget_all() -> None:
    with _lock:
        for cache in _caches.values():
            cache.clear()


def connect_signals() -> None:
    for model in (ApiKey, Backend, TaskProfile, RouterVersion):
        post_save.connect(clear, sender=model, dispatch_uid=f"lookups-clear-save-{model.__name__}")
        post_delete.connect(clear, sender=model, dispatch_uid=f"lookups-clear-delete-{model.__name__}")
