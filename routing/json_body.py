"""JSON request bodies parsed with bounded size and nesting depth.

``json.loads`` recurses once per nesting level: ``[`` x 200,000 raises RecursionError (a 500) and even a
few thousand levels cost a deep C stack. So the depth is measured first, without recursion: string
literals are cut out with one regular expression, what is left is reduced to its brackets, and a running
sum over those gives the depth. Only a body within both limits reaches ``json.loads``.

A body holding a lone UTF-16 surrogate (``"\\ud800"`` without its pair, or its bytes in the body) is
refused too: it is not Unicode, so no database, journal or UTF-8 encoder downstream can take it. Only a
body whose text shows a surrogate escape at all is searched for one (a rare, linear walk).

Numbers are data a database must hold exactly: ``NaN`` and ``Infinity`` (which Python's parser accepts
but JSON does not have), integers outside a signed 64-bit range and doubles of 1e16 or more (PostgreSQL's
jsonb gives those back as integers) are refused, naming the field (:func:`unstorable_number`): no
database, journal or ledger row could store them as they were sent. A negative zero (``-0.0``) is
parsed as ``0.0``, the same number: jsonb has no negative zero, so every store gives back the value the
parser returned.

Every refusal is a :class:`JsonBodyError` (a ValueError) with a message fit for the caller; the edges
render it as a 400 in their own error shape (routing/protocol.py, app/api/errors.py,
diagnostics/slack/views.py).
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from routing import conf

DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_BYTES = 4 * 1024 * 1024

# A JSON string literal, escapes included. It matches from every quote it starts at: an unterminated
# string runs to the end of the text (a parser would fail inside it, never reaching what follows). A
# pattern that could fail would be tried again at every later quote: quadratic on '"' + '\\"' * n.
_STRING = re.compile(r'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE_HINT = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # after parsing: a valid pair is one code point
_NUL = re.compile("\x00")


class JsonBodyError(ValueError):
    """The body was refused: not JSON, too large or nested too deeply. ``code`` names which."""

    code = "invalid_json"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param  # the field at fault, where one is


class JsonTooDeep(JsonBodyError):
    pass


class JsonTooLarge(JsonBodyError):
    code = "request_too_large"


# Numbers every store of the project takes and gives back equal (core/storable.py's orjson, PostgreSQL's
# jsonb, SQLite's JSON text): a signed 64-bit integer; a finite double below 1e16 in magnitude.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
FLOAT_MAX = 1e16
_INT_DIGITS = 18  # any integer written with fewer digits is in range: the exact check is skipped


class _Unstorable(Exception):
    pass


def _parse_int(text: str) -> int:
    value = int(text)
    if len(text) > _INT_DIGITS and not INT_MIN <= value <= INT_MAX:
        raise _Unstorable
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not -FLOAT_MAX < value < FLOAT_MAX:  # also inf, which 1e999 parses to
        raise _Unstorable
    return value or 0.0  # -0.0 (and -0e5, -1e-400) is 0.0: PostgreSQL's jsonb has no negative zero


def _parse_constant(text: str) -> float:
    raise _Unstorable


def storable_number(value: Any) -> bool:
    """Whether a number (not a bool) is one every store gives back equal."""
    if isinstance(value, float):
        return -FLOAT_MAX < value < FLOAT_MAX
    return INT_MIN <= value <= INT_MAX


def unstorable_number(value: Any) -> str | None:
    """The JSON path (``metadata.n``, ``messages[0].x``) of the first number in ``value`` that
    :func:`storable_number` refuses (NaN and infinities included), or None; no recursion."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            stack.extend((f"{path}.{key}" if path else str(key), v) for key, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, int | float) and not isinstance(item, bool) and not storable_number(item):
            return path or "(the body)"
    return None


def _text(raw: bytes | bytearray | str) -> str:
    if isinstance(raw, str):
        return raw
    try:  # the encodings json.loads accepts for bytes (UTF-8, -16, -32), detected the same way
        return bytes(raw).decode(json.detect_encoding(raw), "surrogatepass")
    except UnicodeDecodeError as exc:
        raise JsonBodyError(f"Request body is not valid JSON: {exc}") from None


def nesting_depth(text: str) -> int:
    """How deeply arrays and objects nest in ``text`` (0 for a scalar); linear, no recursion.

    Brackets inside string literals do not count. For malformed JSON the number may be too high, never
    too low for the part of the text a parser would read before it fails.
    """
    skeleton = _NOT_BRACKETS.sub("", _STRING.sub("", text))
    return max(accumulate(_STEP[char] for char in skeleton), default=0)


def check_depth(raw: bytes | bytearray | str, *, max_depth: int) -> str:
    """The text of ``raw`` when its JSON nests at most ``max_depth`` levels; :class:`JsonTooDeep` if not.

    For a caller whose library parses the JSON itself (slack_bolt, on the Slack endpoint).
    """
    text = _text(raw)
    depth = nesting_depth(text)
    if depth > max_depth:
        raise JsonTooDeep(
            f"Request body nests JSON {depth} levels deep; at most {max_depth} are allowed "
            "(SKILLGATE_MAX_JSON_DEPTH)."
        )
    return text


def loads_bounded(raw: bytes | bytearray | str, *, max_depth: int, max_bytes: int) -> Any:
    """``json.loads(raw)`` for a body of at most ``max_bytes`` nesting at most ``max_depth`` levels.

    Raises :class:`JsonBodyError` (a ValueError) otherwise, or when ``raw`` is not JSON.
    """
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise JsonTooLarge(f"Request body is larger than {max_bytes} bytes.")
    text = check_depth(raw, max_depth=max_depth)
    try:
        data = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
        )
    except _Unstorable:
        field = unstorable_number(json.loads(text))  # parsed again only to name the field
        raise JsonBodyError(
            f"Request body holds a number no field can store exactly at '{field}': NaN and Infinity are "
            f"not JSON, integers must lie within -2^63..2^63-1 and other numbers below 1e16 in magnitude.",
            param=field,
        ) from None
    except RecursionError:  # not reached with a sane max_depth; kept so no limit can turn into a 500
        raise JsonTooDeep(
            f"Request body nests JSON too deeply; at most {max_depth} levels are allowed."
        ) from None
    except ValueError as exc:  # JSONDecodeError, and int() past Python's digit limit
        raise JsonBodyError(f"Request body is not valid JSON: {exc}") from None
    if _SURROGATE_HINT.search(text) and lone_surrogate(data):
        raise JsonBodyError(
            "Request body is not valid JSON: it holds a lone UTF-16 surrogate (a \\uD800-\\uDFFF escape "
            "without its pair), which is not Unicode text."
        )
    return data


def lone_surrogate(value: Any) -> bool:
    """Whether a parsed JSON value holds a lone surrogate in any string, key or value; no recursion."""
    return _holds(value, _SURROGATE)


def nul_character(value: Any) -> bool:
    """Whether a parsed JSON value holds U+0000 in any string, key or value (no recursion): a text
    column of PostgreSQL cannot store it."""
    return _holds(value, _NUL)


def _holds(value: Any, pattern: re.Pattern[str]) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if pattern.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def limits() -> tuple[int, int]:
    """(max depth, max bytes) from ``routing.conf.get().limits``."""
    limits = conf.get().limits
    return limits.max_json_depth, limits.max_body_bytes


# A model's answer (JSON content, tool-call arguments) is parsed by the verifiers and the learning code:
# it is as untrusted as a request body and gets the same bound on nesting.
ANSWER_MAX_DEPTH = 100


def loads_answer(text: str, **kwargs: Any) -> Any:
    """``json.loads(text, **kwargs)`` for a model's answer; JsonTooDeep (a ValueError) past
    :data:`ANSWER_MAX_DEPTH` levels, json.JSONDecodeError when it is not JSON."""
    depth = nesting_depth(text)
    if depth > ANSWER_MAX_DEPTH:
        raise JsonTooDeep(f"JSON nested {depth} levels deep; at most {ANSWER_MAX_DEPTH} are allowed")
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise JsonTooDeep(f"JSON nested too deeply; at most {ANSWER_MAX_DEPTH} levels are allowed") from None


def loads_request(raw: bytes | bytearray | str) -> Any:
    """:func:`loads_bounded` with the limits in settings (``routing.conf.get().limits``)."""
    max_depth, max_bytes = limits()
    return loads_bounded(raw, max_depth=max_depth, max_bytes=max_bytes)
