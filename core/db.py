"""ORM work called from async code outside Django's request cycle (the lean edge, routing/api/).

Django closes broken connections at each request's start and end (the request signals); the edge has
no request cycle, so a function run here that fails on the database closes that thread's connections
itself, and the next call reconnects (a restarted PostgreSQL costs one failed call per thread, not
every call after it). Connections otherwise stay open between calls: psycopg's pool, or SQLite's file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections

P = ParamSpec("P")
T = TypeVar("T")


def _closing_on_error(fn: Callable[P, T]) -> Callable[P, T]:
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except DatabaseError:
            for conn in connections.all(initialized_only=True):
                if not conn.in_atomic_block:
                    conn.close()
            raise

    return run


async def run_sync(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on Django's thread for sync code (asgiref's thread-sensitive executor)."""
    return await sync_to_async(_closing_on_error(fn))(*args, **kwargs)
