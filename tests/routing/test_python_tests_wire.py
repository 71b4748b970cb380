"""What crosses between the answer's process and the tests' process (routing/verifiers/harness/wire.py):
data round-trips exactly; objects, junk and deep nesting do not cross. No sandbox, no database."""

from __future__ import annotations

import collections
import math
import os
import time

import pytest

from routing.verifiers.harness import wire
from routing.verifiers.python_tests import defines, extract_code

VALUES = [
    None,
    True,
    False,
    0,
    -7,
    2**62 - 1,
    2**62,
    -(2**200),
    10**5000,  # over int's 4300-digit str limit: crosses as hex
    0.1,
    -0.0,
    math.inf,
    -math.inf,
    1e308,
    5e-324,
    complex(1.5, -2),
    "",
    "héllo \x00 \ud800",
    b"\x00\xff",
    bytearray(b"ab"),
    [1, [2, [3]]],
    (1, ("a", b"b")),
    {"a": 1, (1, 2): [3], 4: None, frozenset({1}): 2.5},
    {1, "x", (2, 3)},
    frozenset({1, 2}),
    range(1, 10, 3),
    [(), [], {}, set(), ""],
]


def roundtrip(value):
    return wire.decode(wire.encode(value))


@pytest.mark.parametrize("value", VALUES, ids=[f"{type(v).__name__}-{i}" for i, v in enumerate(VALUES)])
def test_data_round_trips_with_its_type(value):
    back = roundtrip(value)
    assert type(back) is type(value)
    assert back == value
    if not isinstance(value, int):  # (a 5000-digit int has no repr)
        assert repr(back) == repr(value)  # -0.0 stays -0.0, tuples stay tuples


def test_nan_crosses_as_nan():
    assert math.isnan(roundtrip(math.nan))


def test_subclasses_cross_as_their_plain_base_value_so_their_methods_never_reach_the_tests():
    class Liar(int):
        __eq__ = lambda *a: True  # noqa: E731
        __hash__ = int.__hash__

    class Text(str):
        def __eq__(self, other):
            return True

    Point = collections.namedtuple("Point", "x y")
    back = roundtrip(
        [Liar(3), Text("a"), Point(1, 2), collections.Counter("aab"), collections.OrderedDict(x=1)]
    )
    assert back == [3, "a", (1, 2), {"a": 2, "b": 1}, {"x": 1}]
    assert [type(v) for v in back] == [int, str, tuple, dict, dict]
    assert back[0] != 4 and back[1] != "b"


def test_an_object_is_not_data_without_a_handle_and_becomes_one_with_it():
    class X:
        __eq__ = lambda *a: True  # noqa: E731

    with pytest.raises(wire.NotData, match="X object is not data"):
        wire.encode(X())
    kept: list[object] = []
    data = wire.encode([X()], lambda obj: len(kept.__iadd__([obj])) - 1)
    assert data == [{"h": [0, "X"]}]
    back = wire.decode(data, wire.Handle)
    assert isinstance(back[0], wire.Handle) and back[0] != 1 and back[0] != back  # identity only
    with pytest.raises(wire.WireError):
        wire.decode(data)  # a handle where none is expected


def test_iterators_are_materialized_and_endless_ones_refused():
    assert list(wire.decode(wire.encode((i * i for i in range(4)), id))) == [0, 1, 4, 9]
    assert list(wire.decode(wire.encode(map(str, [1, 2]), id))) == ["1", "2"]
    with pytest.raises(wire.NotData, match="more than"):
        wire.encode(iter(int, 1), id)  # endless


def test_cycles_and_deep_nesting_are_refused_both_ways():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(wire.NotData, match="deeper"):
        wire.encode(cycle)
    deep: list = []
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(wire.WireError, match="deeper"):
        wire.decode(deep)


@pytest.mark.parametrize(
    "junk",
    [1.5, {"a": 1, "b": 2}, {"zz": 1}, {"f": "not hex"}, {"d": [[1]]}, {"s": [[1]]}, {"r": [1, 2, 3, 4]},
     {"b": "@@"}, {"i": "0xg"}, {"t": 3}, {"h": ["1", "x"]}],
)  # fmt: skip
def test_junk_does_not_decode(junk):
    with pytest.raises(wire.WireError):
        wire.decode(junk, wire.Handle)


def test_frames_cross_a_pipe_and_junk_frames_are_refused():
    read, write = os.pipe()
    try:
        wire.send(write, {"value": wire.encode([1, 2.5])})
        assert wire.decode(wire.receive(read)["value"]) == [1, 2.5]
        os.write(write, (5).to_bytes(4, "big") + b"[1,2]")
        with pytest.raises(wire.WireError, match="not a JSON object"):
            wire.receive(read)
        os.write(write, (2**31).to_bytes(4, "big"))
        with pytest.raises(wire.WireError, match="over the"):
            wire.receive(read)
        os.write(write, (4).to_bytes(4, "big") + b"\xff\xfe{}")
        with pytest.raises(wire.WireError):
            wire.receive(read)
    finally:
        os.close(write)
    with pytest.raises(EOFError):
        wire.receive(read)
    os.close(read)


BLANKS = 1_000_000


@pytest.mark.parametrize(
    "text",
    [
        " " * BLANKS,
        "\t" * BLANKS,
        " \n" * (BLANKS // 2),
        "```" + " " * BLANKS,
        "```" + "\t" * BLANKS,
        "```\n" + " " * BLANKS,
        "```python\n" + " \n" * (BLANKS // 2),
        "def" + " " * BLANKS,
        "async " * (BLANKS // 6),
        "```\n" * (BLANKS // 4),
    ],
    ids=["spaces", "tabs", "blank-lines", "fence-spaces", "fence-tabs", "open-spaces", "open-lines",
         "def-spaces", "async", "fences"],
)  # fmt: skip
def test_code_extraction_is_linear_on_a_megabyte_of_blanks(text):
    started = time.thread_time()  # CPU time of this thread: other work on the machine does not count
    extract_code(text)
    defines(text, "add")
    assert time.thread_time() - started < 0.5  # Python's re took minutes on the fence shapes
