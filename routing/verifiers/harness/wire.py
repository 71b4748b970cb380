"""What crosses the pipe between the answer's process and the tests' process: data, never objects.

Runs inside the sandbox (both sides) and in the gateway's tests; standard library only, no Django.

A frame is a 4-byte big-endian length and that many bytes of JSON. A value is encoded as JSON where
JSON has the type (None, bool, small int, str, list) and as a one-key object tagging everything else:
``{"i": hex}`` a big int, ``{"f": float.hex()}`` a float (nan and inf included, -0.0 kept),
``{"c": [re, im]}`` a complex, ``{"b": base64}`` bytes, ``{"ba": base64}`` a bytearray,
``{"t": [...]}`` a tuple, ``{"d": [[k, v], ...]}`` a dict, ``{"s": [...]}`` a set, ``{"fs": [...]}`` a
frozenset, ``{"r": [start, stop, step]}`` a range, ``{"it": [...]}`` an iterator (materialized), and
``{"h": [id, type name]}`` a handle on an object that stays in the answer's process. Nothing is ever
unpickled or unmarshalled; decoding builds only the plain types above (and :class:`Handle` by a
callback), so an answer's object with a forged ``__eq__`` never reaches the tests.
"""

import base64
import json
import os

MAX_FRAME = 16 * 1024 * 1024
MAX_DEPTH = 200
MAX_ITEMS = 1_000_000  # items materialized from one iterator
_SMALL = 1 << 62
_JSON = json.JSONDecoder(object_pairs_hook=None)
_KEYS_ITEMS: tuple[type, ...] = (type({}.keys()), type({}.items()))
_VALUES: type = type({}.values())


class WireError(Exception):
    """The other side sent something that is not a frame of data."""


class NotData(Exception):
    """A value that does not cross: the message says what it was."""


def send(fd, message):
    data = json.dumps(message, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()
    if len(data) > MAX_FRAME:
        raise NotData(f"a message of {len(data)} bytes is over the {MAX_FRAME}-byte limit")
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd, size):
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd):
    """One message (a dict); :class:`EOFError` when the pipe is closed, :class:`WireError` on junk."""
    size = int.from_bytes(_read_exactly(fd, 4), "big")
    if size > MAX_FRAME:
        raise WireError(f"a frame of {size} bytes is over the {MAX_FRAME}-byte limit")
    try:
        message = _JSON.decode(_read_exactly(fd, size).decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise WireError(f"a frame that is not JSON: {type(exc).__name__}") from None
    if not isinstance(message, dict):
        raise WireError("a frame that is not a JSON object")
    return message


def encode(value, handle=None, depth=0):
    """``value`` as JSON-ready data. ``handle(obj)`` names an object that is not data (the answer's
    side keeps it and sends a handle); without it such a value raises :class:`NotData`."""
    if depth > MAX_DEPTH:
        raise NotData(f"a value nested deeper than {MAX_DEPTH} levels (or a cycle)")
    down = depth + 1
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int):
        number = int.__index__(value)  # the plain int of a subclass: its own methods never run
        return number if -_SMALL < number < _SMALL else {"i": hex(number)}
    if isinstance(value, float):
        return {"f": float.hex(value)}
    if isinstance(value, complex):
        return {"c": [float.hex(complex.__getattribute__(value, n)) for n in ("real", "imag")]}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return {"b": base64.b64encode(bytes.__bytes__(value)).decode()}
    if isinstance(value, bytearray):
        return {"ba": base64.b64encode(bytes(memoryview(value))).decode()}
    if isinstance(value, list):
        return [encode(item, handle, down) for item in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"t": [encode(item, handle, down) for item in tuple.__iter__(value)]}
    if isinstance(value, dict):
        return {"d": [[encode(k, handle, down), encode(v, handle, down)] for k, v in dict.items(value)]}
    if isinstance(value, frozenset):
        return {"fs": [encode(item, handle, down) for item in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"s": [encode(item, handle, down) for item in set.__iter__(value)]}
    if isinstance(value, range):
        return {"r": [encode(value.start), encode(value.stop), encode(value.step)]}
    if isinstance(value, _KEYS_ITEMS):
        return {"s": [encode(item, handle, down) for item in value]}  # type: ignore[attr-defined]
    if isinstance(value, _VALUES):
        return [encode(item, handle, down) for item in value]  # type: ignore[attr-defined]
    if handle is None:
        raise NotData(f"a {type(value).__name__} object is not data")
    if hasattr(type(value), "__next__") and hasattr(type(value), "__iter__"):  # generators, map, zip...
        items: list = []
        for item in value:
            if len(items) >= MAX_ITEMS:
                raise NotData(f"an iterator of more than {MAX_ITEMS} items")
            items.append(encode(item, handle, down))
        return {"it": items}
    return {"h": [handle(value), type(value).__name__]}


class Handle:
    """An object that stayed in the answer's process: only its attributes and calls cross (the tests'
    side gives it those); no operator of the answer's object ever runs for the tests."""

    __slots__ = ("_sg_id", "_sg_type")

    def __init__(self, ident, type_name):
        object.__setattr__(self, "_sg_id", ident)
        object.__setattr__(self, "_sg_type", type_name)

    def __repr__(self):
        return f"<the answer's {object.__getattribute__(self, '_sg_type')} object>"


def decode(data, handle=None, depth=0):
    """The value ``data`` encodes. ``handle(ident, type_name)`` builds a handle; without it a handle is
    refused. Raises :class:`WireError` on anything else."""
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested deeper than {MAX_DEPTH} levels")
    down = depth + 1
    if data is None or isinstance(data, bool | int | str):
        return data
    if isinstance(data, list):
        return [decode(item, handle, down) for item in data]
    if not (isinstance(data, dict) and len(data) == 1):
        raise WireError(f"not an encoded value: {type(data).__name__}")
    ((tag, body),) = data.items()
    try:
        return _decode_tagged(tag, body, handle, down)
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise WireError(f"a malformed {tag!r} value: {type(exc).__name__}") from None


def _items(body, handle, depth):
    if not isinstance(body, list):
        raise TypeError("items are not a list")
    return [decode(item, handle, depth) for item in body]


def _decode_tagged(tag, body, handle, depth):
    if tag == "i":
        return int(body, 16)
    if tag == "f":
        return float.fromhex(body)
    if tag == "c":
        real, imag = body
        return complex(float.fromhex(real), float.fromhex(imag))
    if tag in ("b", "ba"):
        raw = base64.b64decode(body.encode("ascii"), validate=True)
        return raw if tag == "b" else bytearray(raw)
    if tag == "t":
        return tuple(_items(body, handle, depth))
    if tag == "d":
        pairs = _items(body, handle, depth)
        if not all(isinstance(pair, list) and len(pair) == 2 for pair in pairs):
            raise TypeError("a dict is a list of pairs")
        return {key: value for key, value in pairs}
    if tag == "s":
        return set(_items(body, handle, depth))
    if tag == "fs":
        return frozenset(_items(body, handle, depth))
    if tag == "r":
        return range(*_items(body, handle, depth))
    if tag == "it":
        return iter(_items(body, handle, depth))
    if tag == "h" and handle is not None:
        ident, type_name = body
        if not (isinstance(ident, int) and isinstance(type_name, str)):
            raise TypeError("a handle is an id and a type name")
        return handle(ident, type_name[:100])
    raise ValueError(f"unknown tag {tag!r}")
