"""Per-tool facts the router's meta features read, once per distinct tool per process.

Agents send the same tool schemas on every turn; walking each schema per call was most of the meta
block's cost (20 tools of 8 fields: ~0.45 ms a call). A tool's shape (``calls.SchemaShape`` of it
alone) is kept by the digest of its JSON (``calls.tool_json``, made once per call), and a call's shape
is the exact sum of its tools' (plus its response schema's): counts add, depths and the largest tool's
required count take the max.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import cachetools

from routing.router.learning.calls import SchemaShape, digest, schema_shape, tool_json

__all__ = ["digest", "tool_json", "tool_shape", "tools_shape"]

SHAPES_CACHED = 8192  # a shape is a few hundred bytes, whatever the tool's size


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
