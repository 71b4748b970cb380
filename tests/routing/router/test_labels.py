"""Comparators: a student's answer judged against the teacher's by the answer's shape, or unknown."""

from __future__ import annotations

import json

import pytest

from routing.router.learning.labels import Label, compare, normalise


def text(content: str) -> dict:
    return {"role": "assistant", "content": content}


def calls(*pairs: tuple[str, object]) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
            }
            for i, (name, args) in enumerate(pairs)
        ],
    }


@pytest.mark.parametrize(
    ("student", "teacher", "teacher_ok", "label"),
    [
        # tool calls: name and arguments, as data, in any order
        (
            calls(("get", {"a": 1, "b": "x"})),
            calls(("get", {"b": "x", "a": 1.0})),
            True,
            Label(True, "tool_calls"),
        ),
        (calls(("get", '{"a": 1}')), calls(("get", {"a": 2})), True, Label(False, "tool_calls")),
        (calls(("get", {"a": 1})), calls(("put", {"a": 1})), True, Label(False, "tool_calls")),
        (
            calls(("a", {}), ("b", {"x": [1, 2]})),
            calls(("b", {"x": [1, 2]}), ("a", {})),
            True,
            Label(True, "tool_calls"),
        ),
        (calls(("get", {"a": 1})), calls(("get", {"a": 2})), False, Label(None, "none")),  # reference failed
        # calling a tool where the reference answered in text (or the reverse)
        (calls(("get", {})), text("No tool fits."), True, Label(False, "tool_use")),
        (text("It is 4."), calls(("get", {})), True, Label(False, "tool_use")),
        # JSON after normalisation: key order, 1 == 1.0, whitespace inside strings
        (
            text('{"total": 1, "name": "a  b"}'),
            text('{"name": "a b", "total": 1.0}'),
            True,
            Label(True, "json"),
        ),
        (text('```json\n{"total": 1}\n```'), text('{"total": 1}'), True, Label(True, "json")),
        (text('{"total": 2}'), text('{"total": 1}'), True, Label(False, "json")),
        (
            text("The total is 1."),
            text('{"total": 1}'),
            True,
            Label(False, "json"),
        ),  # prose where JSON was due
        # free text: identical is correct; anything else is unknown, never passed
        (text("The  answer is 4."), text("The answer is 4."), True, Label(True, "text_equal")),
        (text("Four."), text("The answer is 4."), True, Label(None, "none")),
        (text("Paris"), text("London"), True, Label(None, "none")),
        (None, text("x"), True, Label(None, "none")),
    ],
)
def test_compare_fits_the_answer_shape(student, teacher, teacher_ok, label):
    assert compare(student, teacher, teacher_ok) == label


def test_normalise_decodes_json_strings_and_numbers():
    assert normalise({"a": '{"b": 1}', "c": [1, 2.0], "d": " x  y "}) == {
        "a": {"b": 1.0},
        "c": [1.0, 2.0],
        "d": "x y",
    }
    assert normalise(True) is True and normalise(None) is None  # booleans are not numbers


def test_true_is_not_one():
    assert compare(text('{"a": true}'), text('{"a": 1}'), True) == Label(False, "json")
    assert compare(calls(("f", {"a": True})), calls(("f", {"a": 1})), True) == Label(False, "tool_calls")
