"""Reads that see one committed state of the database, however many queries they take.

A page that reads a row and then its children in separate queries (an incident, then its trajectories
and actions by prefetch) can otherwise see two moments: the incident read before a worker's commit,
its trajectory after it. On a live page that is not cosmetic: the trajectory says finished, so the
page stops following, while the status it shows stays "investigating" for good.

``snapshot()`` runs the block in one transaction whose reads share a snapshot:

- PostgreSQL: REPEATABLE READ (its snapshot is taken at the first query and held to the end);
- SQLite: the transaction itself (the settings open it IMMEDIATE, so no writer commits in between).

Inside a transaction already open, the block joins it: its isolation was the caller's choice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import DEFAULT_DB_ALIAS, connections, transaction


@contextlib.contextmanager
def snapshot(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    connection = connections[using]
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic(using=using):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield
