"""Values every database column and the ledger journal can take.

A JSON request may carry what PostgreSQL refuses: ``\\u0000`` (text and jsonb hold no NUL) and a lone
surrogate such as ``\\ud800`` (not Unicode; orjson refuses it too), and integers past 64 bits, which
orjson refuses. Any caller can send them, and so can a model in its answer; a row holding one fails its
insert, and with it the group commit of every other call in the batch. So what is written goes through
:func:`storable` first: one orjson pass finds nothing to change for almost every row and returns the
value itself; otherwise a copy has each NUL and lone surrogate replaced by U+FFFD (the replacement
character) and each integer orjson cannot write as its decimal string.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what orjson writes


def storable_json(value: Any) -> tuple[Any, bytes]:
    """``(value, its JSON)``, the value made storable when it was not (the same object when it was)."""
    try:
        encoded = orjson.dumps(value, default=str, option=_OPTIONS)
    except TypeError:  # a lone surrogate, or an integer past 64 bits
        encoded = b""
    if encoded and b"\\u0000" not in encoded:
        return value, encoded
    cleaned = _clean(value)
    return cleaned, orjson.dumps(cleaned, default=str, option=_OPTIONS)


def storable(value: Any) -> Any:
    """``value``, or a copy of it that PostgreSQL and orjson can take (see the module's text)."""
    return storable_json(value)[0]


def storable_text(value: Any) -> Any:
    """``value`` (a str, or a JSON value for a jsonb column), or a copy with each NUL and lone surrogate
    in its strings replaced; integers are left as they are (PostgreSQL stores any)."""
    if isinstance(value, str):
        return _UNSTORABLE.sub(REPLACEMENT, value) if _UNSTORABLE.search(value) else value
    try:
        if b"\\u0000" not in orjson.dumps(value, default=str, option=_OPTIONS):
            return value
    except TypeError:  # a lone surrogate, or an integer past 64 bits: look at the strings
        pass
    return _clean(value, ints=False)


def _clean(value: Any, *, ints: bool = True) -> Any:
    if isinstance(value, str):
        return _UNSTORABLE.sub(REPLACEMENT, value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if not ints or _INT_MIN <= value <= _INT_MAX else str(value)
    if isinstance(value, dict):
        return {
            _clean(key) if isinstance(key, str) else key: _clean(item, ints=ints)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_clean(item, ints=ints) for item in value]
    return value
