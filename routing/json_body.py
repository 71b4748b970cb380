"""JSON request bodies parsed with bounded size, element count and nesting depth.

Parsing runs on the serving process's event loop, under the GIL, so what a caller controls must cost
little there, whatever the body (issue 37: 3.9 MB of nested empty arrays froze every call for seconds).
So a request body is bounded *before* anything walks it in Python:

1. :func:`scan` measures it at C speed: escapes dropped with ``bytes.replace``, strings cut out with
   ``split``/``join`` on the quotes, the rest reduced with ``bytes.translate``; its *elements* (each
   array, object and string, and each comma between values) counted with ``bytes.count``, its depth by
   a numpy running sum over its brackets. No Python loop over the body, no recursion. A body past
   ``SKILLGATE_MAX_JSON_ELEMENTS`` (:class:`JsonTooComplex`) or ``SKILLGATE_MAX_JSON_DEPTH``
   (:class:`JsonTooDeep`) is refused there;
2. orjson parses it (C), with the cyclic GC paused (:func:`_parsed`);
3. only where the text outside strings shows a sign, an exponent or 17 digits in a row does one
   iterative walk over the (now bounded) values check the numbers (below).

A body orjson refuses is parsed again by ``json.loads`` only where that says why better (a number,
with its field; a lone surrogate); it is within the bounds, so that costs little too. Answers of models
(:func:`loads_answer`) get the same C-speed depth measure (:func:`nesting_depth`) before ``json.loads``.

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

import gc
import json
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np
import orjson

from routing import conf

DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_ELEMENTS = 100_000

# A JSON string literal, escapes included. It matches from every quote it starts at: an unterminated
# string runs to the end of the text (a parser would fail inside it, never reaching what follows). A
# pattern that could fail would be tried again at every later quote: quadratic on '"' + '\\"' * n.
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


class JsonTooComplex(JsonBodyError):
    """More elements than ``SKILLGATE_MAX_JSON_ELEMENTS`` (a 400, like a body nested too deeply)."""


class JsonTooLarge(JsonBodyError):
    code = "request_too_large"


# Numbers every store of the project takes and gives back equal (core/storable.py's orjson, PostgreSQL's
# jsonb, SQLite's JSON text): a signed 64-bit integer; a finite double below 1e16 in magnitude.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
FLOAT_MAX = 1e16
_INT_DIGITS = 18  # any integer written with fewer digits is in range: the exact check is skipped


def storable_number(value: Any) -> bool:
    """Whether a number (not a bool) is one every store gives back equal."""
    if isinstance(value, float):
        return -FLOAT_MAX < value < FLOAT_MAX
    return INT_MIN <= value <= INT_MAX


def unstorable_number(value: Any) -> str | None:
    """The JSON path (``metadata.n``, ``messages[0].x``) of the first number in ``value`` that
    :func:`storable_number` refuses (NaN and infinities included), or None; no recursion, and no path
    is built until one is found."""
    keys: list[str | int] = []
    stack: list[Any] = [iter([("", value)])]
    while stack:
        for key, item in stack[-1]:
            if isinstance(item, dict | list):
                keys.append(key)
                stack.append(iter(item.items() if isinstance(item, dict) else enumerate(item)))
                break
            if isinstance(item, int | float) and not isinstance(item, bool) and not storable_number(item):
                return _path([*keys, key][1:]) or "(the body)"
        else:
            stack.pop()
            if keys:
                keys.pop()
    return None


def _path(keys: list[str | int]) -> str:
    path = ""
    for key in keys:
        path += f"[{key}]" if isinstance(key, int) else (f".{key}" if path else key)
    return path


def _text(raw: bytes | bytearray | str) -> str:
    if isinstance(raw, str):
        return raw
    try:  # the encodings json.loads accepts for bytes (UTF-8, -16, -32), detected the same way
        return bytes(raw).decode(json.detect_encoding(raw), "surrogatepass")
    except UnicodeDecodeError as exc:
        raise JsonBodyError(f"Request body is not valid JSON: {exc}") from None


def nesting_depth(text: str) -> int:
    """How deeply arrays and objects nest in ``text`` (0 for a scalar); linear, no recursion, at C speed
    (``bytes`` methods and a numpy running sum).

    Brackets inside string literals do not count. For malformed JSON the number may be too high, never
    too low for the part of the text a parser would read before it fails.
    """
    raw = _unescaped(text.encode("utf-8", "surrogatepass"))
    outside = b"".join(raw.split(b'"')[::2]) if b'"' in raw else raw
    return _depth(outside.translate(None, _NOT_BRACKET))


def check_depth(raw: bytes | bytearray | str, *, max_depth: int) -> str:
    """The text of ``raw`` when its JSON nests at most ``max_depth`` levels; :class:`JsonTooDeep` if not.

    For a caller whose library parses the JSON itself (slack_bolt, on the Slack endpoint).
    """
    text = _text(raw)
    depth = nesting_depth(text)
    if depth > max_depth:
        raise JsonTooDeep(
            f"Request body nests JSON at least {depth} levels deep; at most {max_depth} are allowed "
            "(SKILLGATE_MAX_JSON_DEPTH)."
        )
    return text


# What is left of a body outside its strings, for the scan: digits all read "0", whitespace and letters
# other than e/E are deleted (bytes.translate, C speed); brackets, commas, colons, signs and points stay.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NOT_KEPT = bytes(set(range(256)) - set(b"[]{},:-.eE0123456789"))
_NOT_BRACKET = bytes(set(range(256)) - set(b"[]{}"))
_BRACKET_STEP = np.zeros(256, dtype=np.int8)
_BRACKET_STEP[[ord("["), ord("{")]] = 1
_BRACKET_STEP[[ord("]"), ord("}")]] = -1
_BRACKET_STEP_OF = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_SHORT = 64


# orjson refusals json.loads explains better (a number, with its field; a lone surrogate): it parses
# those again (NaN and Infinity read as "unexpected character" to orjson).
_JSON_SAYS_BETTER = ("number", "surrogate")
_NOT_JSON_NUMBERS = (b"NaN", b"Infinity")


@dataclass(frozen=True)
class Scan:
    """What :func:`scan` found: the elements (arrays, objects, strings and the commas between values),
    the nesting depth (a lower bound only where the elements are over the limit), whether closing
    brackets outnumber opening ones (never JSON), and whether a number may need the exact check."""

    elements: int
    depth: int
    unbalanced: bool
    number_hint: bool


def scan(raw: bytes, *, max_elements: int) -> Scan:
    """The structure of the JSON text ``raw`` at C speed: ``bytes`` methods and one numpy sum, no Python
    loop over the body, no recursion. Exact for the part of ``raw`` a parser reads before its first
    error (escapes are dropped first, so every quote left opens or closes a string). Past
    ``max_elements`` the depth is only that of a prefix (a lower bound)."""
    raw = _unescaped(raw)
    quotes = raw.count(b'"')
    strings = (quotes + 1) // 2  # an unterminated string runs to the end
    outside = b"".join(raw.split(b'"')[::2]) if quotes and strings <= max_elements else raw
    text = outside.translate(_DIGITS_AS_ZERO, _NOT_KEPT)
    opens = text.count(b"[") + text.count(b"{")
    closes = text.count(b"]") + text.count(b"}")
    elements = strings + opens + text.count(b",")
    hint = _number_hint(text)
    brackets = text.translate(None, _NOT_BRACKET)
    if elements > max_elements or closes > opens:
        # A body refused anyway: its depth only as far as is cheap (a bounded prefix; where the text
        # ends it is opens - closes deep), to say "too deep" rather than "too many" where it is.
        depth = max(_depth(brackets[: 2 * max_elements]), opens - closes)
        return Scan(elements, depth, closes > opens, hint)
    return Scan(elements, _depth(brackets), False, hint)


def _unescaped(raw: bytes) -> bytes:
    """``raw`` without its escaped backslashes and quotes, so every quote left opens or closes a string
    (exact up to the first error a parser would stop at; outside a string a backslash is one)."""
    if b"\\" in raw:
        return raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    return raw


def _depth(brackets: bytes) -> int:
    """The deepest nesting of a string of brackets: a running sum, in numpy."""
    if len(brackets) <= _SHORT:  # numpy's fixed cost is more than a short Python loop's
        return max(0, max(accumulate(_BRACKET_STEP_OF[char] for char in brackets), default=0))
    steps = _BRACKET_STEP[np.frombuffer(brackets, dtype=np.uint8)]
    return max(int(np.cumsum(steps, dtype=np.int64).max()), 0)


def _number_hint(text: bytes) -> bool:
    """Whether a number in the outside text may be unstorable or a negative zero. A one-byte search
    (memchr) first: searching for two bytes costs ten times as much."""
    return (
        (b"-" in text and b"-0" in text)
        or ((b"e" in text or b"E" in text) and (b"0e" in text or b"0E" in text))
        or b"0" * 17 in text
    )


def _numbers(data: Any) -> bool:
    """Whether parsed JSON holds an unstorable number (one iterative walk); a negative zero inside it
    is made 0.0 in place (PostgreSQL's jsonb has no negative zero)."""
    if type(data) is not dict and type(data) is not list:
        return _unstorable_scalar(data)
    unstorable = False
    zeros: list[Any] = []
    stack: list[Any] = [data]
    while stack:
        item = stack.pop()
        has_zero = False
        for value in item.values() if type(item) is dict else item:
            kind = type(value)
            if kind is dict or kind is list:
                stack.append(value)
            elif kind is float:
                if not -FLOAT_MAX < value < FLOAT_MAX:
                    unstorable = True
                elif value == 0.0:
                    has_zero = True
            elif kind is int and not INT_MIN <= value <= INT_MAX:
                unstorable = True
        if has_zero:
            zeros.append(item)
    for container in zeros:
        for key in list(container.keys() if type(container) is dict else range(len(container))):
            if type(container[key]) is float and container[key] == 0.0:
                container[key] = 0.0
    return unstorable


def _unstorable_scalar(value: Any) -> bool:
    if type(value) is float:
        return not -FLOAT_MAX < value < FLOAT_MAX
    return type(value) is int and not INT_MIN <= value <= INT_MAX


def _parsed(data_bytes: bytes) -> Any:
    """orjson's parse with the cyclic GC paused: the new containers cannot form cycles, and a
    collection every 700 of them made a body of 100,000 empty arrays cost 4 times as much."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return orjson.loads(data_bytes)
    finally:
        if enabled:
            gc.enable()


def _too_deep(depth: int, max_depth: int) -> JsonTooDeep:
    return JsonTooDeep(
        f"Request body nests JSON at least {depth} levels deep; at most {max_depth} are allowed "
        "(SKILLGATE_MAX_JSON_DEPTH)."
    )


def _unstorable_error(data: Any) -> JsonBodyError:
    field = unstorable_number(data)  # a walk that builds paths: only for a body refused anyway
    return JsonBodyError(
        f"Request body holds a number no field can store exactly at '{field}': NaN and Infinity are "
        f"not JSON, integers must lie within -2^63..2^63-1 and other numbers below 1e16 in magnitude.",
        param=field,
    )


def loads_bounded(
    raw: bytes | bytearray | str,
    *,
    max_depth: int,
    max_bytes: int,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> Any:
    """The JSON value of a body of at most ``max_bytes``, ``max_elements`` (:func:`scan`) and
    ``max_depth`` levels; numbers every store keeps exactly, no lone surrogate.

    Raises :class:`JsonBodyError` (a ValueError) otherwise, or when ``raw`` is not JSON.
    """
    data_bytes = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    if len(data_bytes) > max_bytes:
        raise JsonTooLarge(f"Request body is larger than {max_bytes} bytes.")
    if json.detect_encoding(data_bytes) != "utf-8":  # UTF-16, -32 or a BOM: scanned and parsed as UTF-8
        data_bytes = _text(data_bytes).encode("utf-8", "surrogatepass")
    found = scan(data_bytes, max_elements=max_elements)
    if found.depth > max_depth:
        raise _too_deep(found.depth, max_depth)
    if found.elements > max_elements:
        raise JsonTooComplex(
            f"Request body holds more than {max_elements} JSON elements (arrays, objects, strings and "
            f"the commas between values); at most {max_elements} are allowed (SKILLGATE_MAX_JSON_ELEMENTS)."
        )
    if found.unbalanced:
        raise JsonBodyError("Request body is not valid JSON: it closes more brackets than it opens.")
    try:
        data = _parsed(data_bytes)
    except orjson.JSONDecodeError as exc:
        reason = str(exc)
        if not any(word in reason for word in _JSON_SAYS_BETTER) and not any(
            word in data_bytes for word in _NOT_JSON_NUMBERS
        ):
            raise JsonBodyError(f"Request body is not valid JSON: {reason}") from None
        data = _loads_refused(raw, reason)  # a number's field is named below, or the lone surrogate
        number_hint = True
    else:
        number_hint = found.number_hint
    if number_hint and _numbers(data):
        raise _unstorable_error(data)
    return data or 0.0 if type(data) is float else data  # a bare -0.0 is 0.0 too


def _loads_refused(raw: bytes | bytearray | str, reason: str) -> Any:
    """``json.loads`` of a body orjson refused (it is within the element and depth bounds): a
    JsonBodyError in this module's words (a lone surrogate; NaN and the other unstorable numbers are
    left to the caller's check), or the value."""
    text = _text(raw)
    try:
        data = json.loads(text)
    except RecursionError:  # not reached within the depth bound; kept so no limit can turn into a 500
        raise JsonTooDeep("Request body nests JSON too deeply.") from None
    except ValueError as exc:  # JSONDecodeError, and int() past Python's digit limit
        raise JsonBodyError(f"Request body is not valid JSON: {exc}") from None
    if "surrogate" in reason and lone_surrogate(data):
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


def limits() -> tuple[int, int, int]:
    """(max depth, max bytes, max elements) from ``routing.conf.get().limits``."""
    limits = conf.get().limits
    return limits.max_json_depth, limits.max_body_bytes, limits.max_json_elements


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
    max_depth, max_bytes, max_elements = limits()
    return loads_bounded(raw, max_depth=max_depth, max_bytes=max_bytes, max_elements=max_elements)
