"""Per-tool facts the router's meta features read, once per distinct tool per process.

Agents send the same tool schemas on every turn; walking each schema per call was most of the meta
block's cost (20 tools of 8 fields: ~0.45 ms a call). A tool's shape (``calls.SchemaShape`` of it
alone) is kept by the digest of its canonical JSON, and a call's shape is the exact sum of its tools'
(plus its response schema's): counts add, depths and the largest tool's required count take the max.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from typing import Any

import cachetools
import orjson

from routing.router.learning.calls import SchemaShape, schema_shape

SHAPES_CACHED = 8192  # a shape is a few hundred bytes, whatever the tool's size


def tool_json(tool: Any) -> str:
    """The tool's canonical JSON (sorted keys): the key of its cached words and shape. orjson (in C);
    json for what orjson refuses (a lone surrogate, an integer beyond 64 bits)."""
    try:
        return orjson.dumps(tool, option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(tool, sort_keys=True)


def digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


@cachetools.cached(cache=cachetools.LRUCache(maxsize=SHAPES_CACHED), key=digest, lock=threading.Lock())
def tool_shape(text: str) -> SchemaShape:
    """The shape of the one tool ``text`` (from ``tool_json``). Shared: never mutate it."""
    return schema_shape([json.loads(text)], None)


def tools_shape(texts: Sequence[str], response_format: dict[str, Any] | None) -> SchemaShape:
    """``schema_shape(tools, response_format)`` from the tools' cached shapes."""
    total = schema_shape([], response_format)
    for text in texts:
        one = tool_shape(text)
        total.required += one.required
        total.max_required = max(total.max_required, one.max_required)
        total.fields += one.fields
        total.depth = max(total.depth, one.depth)
        for kind, count in one.types.items():
            total.types[kind] += count
    return total
