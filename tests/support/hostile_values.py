"""Hostile values for the dashboard's form fuzzers (tests/web/test_form_fuzz.py, test_action_fuzz.py):
huge, negative and unstorable numbers, NaN and infinities, NUL, unicode, long strings, paths that climb,
several values for one field (``VALUE``), or none at all (``MISSING``)."""

from __future__ import annotations

from hypothesis import strategies as st

HOSTILE_WORDS = [
    "99999999999999999999",
    "-99999999999999999999",
    "2147483648",
    "9223372036854775808",
    "-1",
    "0",
    "-0",
    "1e400",
    "1E-400",
    "NaN",
    "nan",
    "inf",
    "-Infinity",
    "0x1F",
    "1_000",
    " ",
    "",
    "\x00",
    "a\x00b",
    "null",
    "true",
    "[]",
    "{}",
    '{"kind": "nope"}',
    '{"kind": "regex", "pattern": "("}',
    "[" * 500,
    "<script>alert(1)</script>",
    "../../etc/passwd",
    "/etc",
    "test_ask_holmes/../../../etc",
    "2030-13-45T25:61",
    "0001-01-01T00:00",
    "9999-12-31T23:59:59",
    "' OR 1=1 --",
    "ｆｕｌｌｗｉｄｔｈ",
    "🙂" * 50,
    "9" * 5000,
    "x" * 100_001,
]
HOSTILE = st.one_of(
    st.sampled_from(HOSTILE_WORDS),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.decimals(allow_nan=False, allow_infinity=False, places=12).map(str),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
    st.text(st.characters(exclude_categories=["Cs"]), min_size=300, max_size=400),
)
MISSING = object()
VALUE = st.one_of(HOSTILE, st.lists(HOSTILE, min_size=2, max_size=3), st.just(MISSING))
