"""Ledger rows into the database with the least work: the group commit's insert (routing/ledger/journal.py)
where it is not one statement with the spend (routing/ledger/group_commit.py: PostgreSQL with leases).

``bulk_create`` costs about 1.8 ms of CPU for a batch of one row and 0.4 ms per row after on PostgreSQL
(Django prepares every field, json.dumps every JSON field, psycopg's client-side binding quotes every
value in Python), and ~0.2 ms per row on SQLite (a model built per row first). Instead the journal's
JSON values go in as they are, the JSON columns encoded by orjson (core/fastjson.py):

- PostgreSQL: ``COPY ... FROM STDIN``, which psycopg writes in C;
- SQLite (the embedded default): one ``executemany`` of a prepared INSERT, each value as Django's
  SQLite backend would write it (a UUID as its hex, a time as naive UTC text, JSON with json.dumps's
  values in orjson's UTF-8, a decimal through the field's own preparation);
- any other database: ``bulk_create``.

Every column is sent (a field the row lacks gets the model's default), so the table sees exactly what
``Invocation(**row).save()`` would write. Foreign keys are checked at commit (Django makes them
deferrable), where a violation is Django's ``IntegrityError``, as with ``bulk_create``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any

import orjson
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


@cache
def _copy_statement() -> str:
    """Quoted once: each name read through Django's connection proxy cost ~2 us per column per batch."""
    table = connection.ops.quote_name(Invocation._meta.db_table)
    names = ", ".join(connection.ops.quote_name(column) for _, column, _, _ in _columns())
    return f"COPY {table} ({names}) FROM STDIN"


def _value(
    row: dict[str, Any], name: str, encode: Callable[[Any], Any], field: models.Field[Any, Any]
) -> Any:
    if name in row:
        return encode(row[name])
    return encode(field.get_default())


def insert(rows: Sequence[dict[str, Any]]) -> None:
    """Inserts ledger rows (``routing.ledger.record.ledger_row`` dicts), inside the caller's transaction."""
    if connection.vendor == "sqlite":
        _insert_sqlite(rows)
        return
    if connection.vendor != "postgresql":
        Invocation.objects.bulk_create([invocation_of(row) for row in rows])
        return
    columns = _columns()
    with connection.cursor() as cursor, connection.wrap_database_errors:
        raw = cursor.cursor  # psycopg's own cursor under Django's wrapper
        with raw.copy(_copy_statement()) as copy:
            for row in rows:
                copy.write_row([_value(row, name, encode, field) for name, _, encode, field in columns])


# --- SQLite ---------------------------------------------------------------------------------------------


def _sqlite_encoder(field: models.Field[Any, Any]) -> Callable[[Any], Any]:
    """How a row's JSON value of ``field`` becomes what Django's SQLite backend writes for it."""
    if isinstance(field, models.JSONField):
        return _sqlite_json(field.encoder)
    if isinstance(field, models.UUIDField):
        return lambda value: None if value is None else uuid.UUID(str(value)).hex
    if isinstance(field, models.DateTimeField):

        def moment(value: Any) -> Any:
            if isinstance(value, str):
                value = datetime.fromisoformat(value)
            return connection.ops.adapt_datetimefield_value(value)

        return moment
    if isinstance(field, models.DecimalField):
        return lambda value: field.get_db_prep_save(
            None if value is None else Decimal(str(value)), connection=connection
        )
    return _plain  # text, numbers, booleans and foreign key ids: as the row holds them


_SQLITE_JSON = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_PASSTHROUGH_DATETIME


def _sqlite_json(encoder: type[json.JSONEncoder] | None) -> Callable[[Any], str | None]:
    """A JSON column's text as Django's reader and SQLite's ``JSON_VALID`` take it: orjson (C, UTF-8;
    its times through the field's encoder as Django writes them), not ``json.dumps``'s escapes: a
    3.6 MB CJK text was 7.5 MB of ``\\u`` escapes and 12-20 ms of the GIL per row, held in the ledger's
    thread while the event loop waited (issue 37). A NaN is ``null`` (``json.dumps``'s ``NaN`` failed
    the insert; PostgreSQL's COPY writes ``null`` too); a value orjson refuses (an integer past 64
    bits) goes through ``json.dumps`` as before."""
    default = encoder().default if encoder is not None else None

    def encode(value: Any) -> str | None:
        if value is None:
            return None
        try:
            return orjson.dumps(value, default=default, option=_SQLITE_JSON).decode()
        except TypeError:  # an integer past 64 bits: as Django writes it
            return json.dumps(value, cls=encoder)

    return encode


@cache
def _sqlite_statement() -> tuple[str, tuple[Column, ...]]:
    columns = tuple(
        (field.attname, str(field.column), _sqlite_encoder(field), field)
        for field in Invocation._meta.concrete_fields
    )
    table = connection.ops.quote_name(Invocation._meta.db_table)
    names = ", ".join(connection.ops.quote_name(column) for _, column, _, _ in columns)
    marks = ", ".join(["%s"] * len(columns))
    return f"INSERT INTO {table} ({names}) VALUES ({marks})", columns


def _insert_sqlite(rows: Sequence[dict[str, Any]]) -> None:
    sql, columns = _sqlite_statement()
    params = [
        [
            encode(row[name]) if name in row else field.get_db_prep_save(field.get_default(), connection)
            for name, _, encode, field in columns
        ]
        for row in rows
    ]
    with connection.cursor() as cursor, connection.wrap_database_errors:
        # Django's SQLite cursor under its wrapper: the rows are storable already (journal.Entry.of), so
        # not through core/db_text.py's guard, which would check every value again.
        cursor.cursor.executemany(sql, params)
