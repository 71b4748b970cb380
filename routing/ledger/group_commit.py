"""The live group commit on PostgreSQL in one statement, so one round trip (routing/ledger/journal.py).

The batch's ledger rows and its spend (routing/budgets/store.py ``flush_spend``) were ``BEGIN``, a
``COPY`` (two round trips), an UPDATE per key, an UPDATE per lease and ``COMMIT``: 5-7 round trips, each
through psycopg's and Django's Python. Here they are one statement with its parameters, run as its own
transaction (or inside the caller's, when there is one):

- the rows: the journal's JSON of each row, joined into one JSON array, expanded by
  ``json_populate_recordset`` over a base record of the columns' static defaults (no Python per column);
- the spend: per key (total spent, and what its leases' calls spent) and per lease, as arrays;
- the lock order of lease_take and lease_return: the keys are locked first, in id order (``locked``,
  ``FOR UPDATE`` above its sort), and no lease row is updated before that (``leased`` joins the count
  of ``locked``, which exists only once every key is locked); then the keys are updated.
- a lease whose row is gone (released elsewhere, which gave back its whole unspent amount) only adds to
  its key's spent: the key's ``reserved`` gives back only what the leases found hold.

Rows of a reservation-mode batch, a replay, or a row lacking a column whose default is computed per row
take the general path (``applies`` is False).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal
from functools import cache
from typing import Any

from django.db import connection, models

from core import fastjson
from routing.budgets import Spend
from routing.models import ApiKey, BudgetLease, Invocation


@cache
def _computed_defaults() -> frozenset[str]:
    """The columns whose default is made per row (an id, a time, a new list): a row must hold them."""
    fields = Invocation._meta.concrete_fields
    return frozenset(f.attname for f in fields if f.has_default() and callable(f.default))


@cache
def _static_defaults() -> str:
    """The base record's JSON: each other column's default as the database takes it (None: NULL)."""
    fields = Invocation._meta.concrete_fields
    defaults: dict[str, Any] = {}
    for field in fields:
        if field.attname in _computed_defaults():
            continue
        value = field.get_default()
        if isinstance(field, models.DecimalField) and value is not None:
            value = str(value)
        defaults[str(field.column)] = value
    return fastjson.dumps(defaults).decode()


@cache
def _statement() -> str:
    q = connection.ops.quote_name
    key = q(ApiKey._meta.db_table)
    lease = q(BudgetLease._meta.db_table)
    table = q(Invocation._meta.db_table)
    if any(f.attname != f.column for f in Invocation._meta.concrete_fields):
        raise RuntimeError("the ledger's row keys are attribute names: each must be its column's name")
    columns = ", ".join(q(str(f.column)) for f in Invocation._meta.concrete_fields)
    spent, reserved = q("spent_usd"), q("reserved_usd")
    return (
        f"WITH key_spend (id, spent) AS (SELECT * FROM unnest(%s::bigint[], %s::numeric[])), "
        f"lease_spend (id, key_id, amount) AS "
        f"(SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::numeric[])), "
        f"locked AS (SELECT k.id FROM {key} k WHERE k.id IN (SELECT id FROM key_spend) "
        f"ORDER BY k.id FOR UPDATE), "
        f"leased AS (UPDATE {lease} l SET {spent} = l.{spent} + s.amount "
        f"FROM lease_spend s, (SELECT count(*) FROM locked) AS keys_locked "
        f"WHERE l.id = s.id RETURNING s.key_id, s.amount), "
        f"settled AS (UPDATE {key} k SET {spent} = k.{spent} + s.spent, {reserved} = k.{reserved} - s.leased "
        f"FROM (SELECT ks.id, ks.spent, COALESCE(sum(l.amount), 0) AS leased FROM key_spend ks "
        f"LEFT JOIN leased l ON l.key_id = ks.id GROUP BY ks.id, ks.spent) s WHERE k.id = s.id), "
        f"written AS (INSERT INTO {table} ({columns}) SELECT {columns} FROM "
        f"json_populate_recordset(json_populate_record(NULL::{table}, %s::json), %s::json)) "
        f"SELECT count(*) FROM leased"
    )


def applies(rows: Sequence[dict[str, Any]], spends: Sequence[Spend]) -> bool:
    """Whether this batch can be committed in one statement (PostgreSQL, leases or no budget)."""
    if connection.vendor != "postgresql":
        return False
    needed = _computed_defaults()
    return all(s.reservation_id is None for s in spends) and all(needed <= row.keys() for row in rows)


def parameters(rows_json: Sequence[bytes], spends: Sequence[Spend]) -> list[Any]:
    """The statement's parameters: the spend per key and per lease (zeros left out, as ``flush_spend``
    does), the defaults and the rows as one JSON array."""
    per_key: dict[int, Decimal] = defaultdict(Decimal)
    per_lease: dict[uuid.UUID, tuple[int, Decimal]] = {}
    for spend in spends:
        per_key[spend.key_id] += spend.cost
        if spend.lease_id is not None:
            key_id, amount = per_lease.get(spend.lease_id, (spend.key_id, Decimal(0)))
            per_lease[spend.lease_id] = (key_id, amount + spend.cost)
    leases = sorted((lease_id, key_id, amount) for lease_id, (key_id, amount) in per_lease.items() if amount)
    leased_keys = {key_id for _, key_id, _ in leases}
    keys = sorted(key_id for key_id, cost in per_key.items() if cost or key_id in leased_keys)
    return [
        keys,
        [per_key[key_id] for key_id in keys],
        [lease_id for lease_id, _, _ in leases],
        [key_id for _, key_id, _ in leases],
        [amount for _, _, amount in leases],
        _static_defaults(),
        (b"[" + b",".join(rows_json) + b"]").decode(),
    ]


def write(rows_json: Sequence[bytes], spends: Sequence[Spend]) -> None:
    """Inserts the rows and flushes their spend: one statement (``applies`` must be True). Outside a
    transaction it is its own; a violation (a deferred foreign key included) raises Django's error."""
    with connection.cursor() as cursor, connection.wrap_database_errors:
        cursor.cursor.execute(_statement(), parameters(rows_json, spends))
