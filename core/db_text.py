"""Every query's text made storable at the database edge (core/storable.py), whatever wrote it.

A NUL or a lone surrogate reaches the database from many places besides a request body: a model's answer
kept as a demonstration or a background sample, a log line a diagnosis tool read from a broken system, a
Slack message. PostgreSQL refuses either in a text or jsonb value (SQLite's driver refuses surrogates),
so the row's insert would fail: a crashed Celery task, a diagnosis left unfinished. This wrapper
(installed on every new connection, routing/apps.py) replaces them with U+FFFD in each str and jsonb
parameter. It costs a regular-expression search per text parameter, and one orjson pass per jsonb one;
the ledger's group commit (routing/ledger/bulk_copy.py: COPY, or executemany on SQLite) does not pass
here and makes its rows storable itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from psycopg.types.json import Jsonb

from core.storable import storable_text


def install(connection: Any, **_: Any) -> None:
    """The ``connection_created`` receiver: adds the wrapper to this connection once.

    Where JSON columns are text (SQLite), a JSONField's value reaches the query as its JSON text, with
    each NUL and lone surrogate written as an escape the wrapper cannot tell from a caller's six
    characters: this connection's JSON adapter cleans the value before it is written instead.
    """
    if guard not in connection.execute_wrappers:
        connection.execute_wrappers.append(guard)
    if connection.vendor != "postgresql" and not getattr(connection.ops, "_storable_json", False):
        adapt = connection.ops.adapt_json_value
        connection.ops.adapt_json_value = lambda value, encoder: adapt(storable_text(value), encoder)
        connection.ops._storable_json = True


def guard(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
    if params:
        params = [_one(p) for p in params] if many else _one(params)
    return execute(sql, params, many, context)


def _one(params: Any) -> Any:
    if isinstance(params, Mapping):
        return {name: _value(value) for name, value in params.items()}
    if isinstance(params, Sequence) and not isinstance(params, str | bytes):
        return [_value(value) for value in params]
    return params


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Jsonb):
        cleaned = storable_text(value.obj)
        return value if cleaned is value.obj else Jsonb(cleaned, dumps=value.dumps)
    return value
