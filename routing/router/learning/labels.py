"""Comparators: whether a student's answer was correct, judged against the teacher's (the reference).

A label is a fact about correctness with its source, or it is unknown: ``Label(None, ...)``. The
comparator fits the answer's shape:

- tool calls: the same multiset of (name, arguments), arguments compared as JSON after normalisation
  (``tool_calls``); one side calling tools where the other answered in text, with the teacher's answer
  passing its verifier, shows the student wrong (``tool_use``);
- JSON content (an object or an array): equality after normalisation (``json``);
- free text: only identical text (after collapsing whitespace) is a label (``text_equal``); anything
  else is unknown, never passed, until a judge compares it.

Normalisation: object keys unordered (dicts compare so), numbers by value (1 == 1.0), strings with their
whitespace collapsed and trimmed, a JSON-encoded string argument decoded (``"{\\"a\\": 1}"`` is
``{"a": 1}``). A difference where the teacher's own answer did not pass its verifier is unknown: the
reference is not known to be right.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from routing.json_body import loads_answer
from routing.verifiers.json_schema import parse_json

SOURCES = ("tool_calls", "tool_use", "json", "text_equal", "verifier", "none")


@dataclass(frozen=True)
class Label:
    """``correct`` True/False, or None: unknown. ``source`` names what decided it."""

    correct: bool | None
    source: str = "none"

    @property
    def known(self) -> bool:
        return self.correct is not None


UNKNOWN = Label(None, "none")


def normalise(value: Any, depth: int = 0) -> Any:
    """A JSON value in a form where equal meaning compares equal (see the module docstring)."""
    if depth > 64:
        return value
    if isinstance(value, dict):
        return {str(k): normalise(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalise(v, depth + 1) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = " ".join(value.split())
        if text[:1] in "{[":
            try:
                inner = json.loads(text)
            except ValueError:
                return text
            if isinstance(inner, dict | list):
                return normalise(inner, depth + 1)
        return text
    return value


def _arguments(raw: Any) -> Any:
    if isinstance(raw, dict | list):
        return normalise(raw)
    try:
        return normalise(loads_answer(raw or "{}"))
    except (ValueError, TypeError):
        return normalise(str(raw))


def tool_calls(message: dict[str, Any] | None) -> list[str] | None:
    """The message's tool calls as a sorted list of canonical (name, arguments) strings; None: no calls."""
    calls = (message or {}).get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for call in calls:
        function = (call.get("function") if isinstance(call, dict) else None) or {}
        if not isinstance(function, dict):
            function = {}
        pair = [str(function.get("name") or ""), _arguments(function.get("arguments"))]
        out.append(json.dumps(pair, sort_keys=True, ensure_ascii=False))
    return sorted(out)


def json_content(message: dict[str, Any] | None) -> Any:
    """The message's content as normalised JSON when it is an object or an array; else None."""
    content = (message or {}).get("content")
    if not isinstance(content, str):
        return None
    value, error = parse_json(content)  # as the json_schema verifier reads it: one ```json fence allowed
    return normalise(value) if error is None and isinstance(value, dict | list) else None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _text(message: dict[str, Any] | None) -> str:
    content = (message or {}).get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return " ".join(str(content or "").split())


def compare(student: dict[str, Any] | None, teacher: dict[str, Any] | None, teacher_ok: bool) -> Label:
    """The student's answer judged against the teacher's. ``teacher_ok``: the teacher's answer passed
    its verifier (or it has none), so a difference shows the student wrong."""
    if not student or not teacher:
        return UNKNOWN
    s_calls, t_calls = tool_calls(student), tool_calls(teacher)
    if s_calls is not None and t_calls is not None:
        if s_calls == t_calls:
            return Label(True, "tool_calls")
        return Label(False, "tool_calls") if teacher_ok else UNKNOWN
    if (s_calls is None) != (t_calls is None):
        # One side called tools and the other did not (BFCL's irrelevance items, a text answer where a
        # call was due): a passing reference shows which was right. A weak verifier passes both.
        return Label(False, "tool_use") if teacher_ok else UNKNOWN
    s_json, t_json = json_content(student), json_content(teacher)
    if s_json is not None and t_json is not None:
        if _canonical(s_json) == _canonical(t_json):  # true is not 1.0 here, as it is to Python's ==
            return Label(True, "json")
        return Label(False, "json") if teacher_ok else UNKNOWN
    if t_json is not None and teacher_ok and _text(student):
        return Label(False, "json")  # JSON was due and the student answered in prose
    text_s, text_t = _text(student), _text(teacher)
    if text_s and text_s == text_t:
        return Label(True, "text_equal")
    return UNKNOWN  # free text: no comparator without a judge; unknown is not passed
