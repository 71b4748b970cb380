"""Ledger rows into PostgreSQL by ``COPY``: the group commit's insert (routing/ledger/journal.py).

``bulk_create`` costs about 1.8 ms of CPU for a batch of one row and 0.4 ms per row after (Django prepares
every field, json.dumps every JSON field, psycopg's client-side binding quotes every value in Python).
``COPY ... FROM STDIN`` takes the journal's JSON values as they are, the JSON columns encoded by orjson
(core/fastjson.py), and psycopg writes them in C. Every column is sent (a field the row lacks gets the
model's default), so the table sees exactly what ``Invocation(**row).save()`` would write. Foreign keys
are checked at commit (Django makes them deferrable), where a violation is Django's ``IntegrityError``, as
with ``bulk_create``.
Other databases (SQLite, the embedded default) keep ``bulk_create``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from django.db import connection, models

from core import fastjson
from routing.ledger.record import invocation_of
from routing.models import Invocation


def _json_text(value: Any) -> str | None:
    return None if value is None else fastjson.dumps(value).decode()


def _plain(value: Any) -> Any:
    return value


Column = tuple[str, str, Callable[[Any], Any], Any]


@cache
def _columns() -> tuple[Column, ...]:
    """(attribute name, column, encoder, field) of every concrete column of the ledger table; a row's
    keys are attribute names (``api_key_id``)."""
    return tuple(
        (
            field.attname,
            str(field.column),
            _json_text if isinstance(field, models.JSONField) else _plain,
            field,
        )
        for field in Invocation._meta.concrete_fields
    )


def _value(
    row: dict[str, Any], name: str, encode: Callable[[Any], Any], field: models.Field[Any, Any]
) -> Any:
    if name in row:
        return encode(row[name])
    return encode(field.get_default())


def insert(rows: Sequence[dict[str, Any]]) -> None:
    """Inserts ledger rows (``routing.ledger.record.ledger_row`` dicts), inside the caller's transaction."""
    if connection.vendor != "postgresql":
        Invocation.objects.bulk_create([invocation_of(row) for row in rows])
        return
    columns = _columns()
    table = connection.ops.quote_name(Invocation._meta.db_table)
    names = ", ".join(connection.ops.quote_name(column) for _, column, _, _ in columns)
    with connection.cursor() as cursor, connection.wrap_database_errors:
        raw = cursor.cursor  # psycopg's own cursor under Django's wrapper
        with raw.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([_value(row, name, encode, field) for name, _, encode, field in columns])
