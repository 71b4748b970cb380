"""JSON encoding on hot paths: orjson, with json.dumps's leniency where the ledger relies on it
(numpy numbers as numbers, non-string keys as strings, anything else through ``str``)."""

from __future__ import annotations

from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=str, option=_OPTIONS)
