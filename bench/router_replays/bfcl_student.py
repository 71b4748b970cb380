"""A rule-based tool caller: the BFCL replay's student (real answers, judged by BFCL's checker).

Not a language model. It reads the request with fixed rules: it picks the documented function whose
name and description share the most words with the request (and calls nothing when none shares
enough: BFCL's irrelevance), splits the request into clauses for the parallel categories, and fills
each required argument from its clause by type: numbers in order for integers and floats, enum
values named in the text, quoted or capitalised phrases for strings, lists of numbers for arrays.
Optional arguments are left out. It gets simple items with numeric arguments right and fails where
an argument needs understanding: the difficulty a small student model shows, from a program whose
rules owe nothing to the router's features. Deterministic.
"""

from __future__ import annotations

import re
from typing import Any

from bench.bfcl.data import Item
from bench.bfcl.requests import tool_call_message

_WORD = re.compile(r"[a-z]+")
_NUMBER = re.compile(r"(?<![\w.])-?\$?\d[\d,]*(?:\.\d+)?%?")
_QUOTED = re.compile(r"['\"“]([^'\"”]{2,60})['\"”]")
_PROPER = re.compile(r"(?<![.?!]\s)(?<!^)\b([A-Z][a-zA-Z]+(?:\s+[A-Z][a-zA-Z]+)*)")
_SPLIT = re.compile(
    r"\band also\b|\balso\b|\band then\b|;|\band\b(?= (?:for|in|of|the|what|how|find|get|calculate))"
)
STOP = {
    "the",
    "a",
    "an",
    "of",
    "for",
    "in",
    "to",
    "and",
    "with",
    "is",
    "what",
    "how",
    "on",
    "by",
    "from",
    "me",
}
MIN_OVERLAP = 2


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOP and len(w) > 2}


def _function_words(function: dict[str, Any]) -> set[str]:
    name = re.sub(r"[._]", " ", str(function.get("name", "")))
    return _words(f"{name} {name} {function.get('description', '')}")


def _best(functions: list[dict[str, Any]], text: str) -> tuple[dict[str, Any] | None, int]:
    words = _words(text)
    scored = [(len(words & _function_words(f)), i) for i, f in enumerate(functions)]
    if not scored:
        return None, 0
    score, index = max(scored)
    return functions[index], score


def _number(token: str, kind: str) -> Any:
    clean = token.replace("$", "").replace(",", "").rstrip("%")
    value = float(clean)
    return int(value) if kind == "integer" and value.is_integer() else value


def _fill(schema: dict[str, Any], text: str) -> dict[str, Any] | None:
    """Arguments for the required parameters from ``text``; None when a required one cannot be filled."""
    numbers = _NUMBER.findall(text)
    quoted = _QUOTED.findall(text)
    proper = [p for p in _PROPER.findall(text) if p.lower() not in STOP]
    props = schema.get("properties") or {}
    args: dict[str, Any] = {}
    for name in schema.get("required") or []:
        spec = props.get(name) or {}
        kind = str(spec.get("type", "string"))
        enum = spec.get("enum")
        if enum:
            named = [e for e in enum if str(e).lower() in text.lower()]
            args[name] = named[0] if named else enum[0]
        elif kind in ("integer", "float", "number"):
            if not numbers:
                return None
            args[name] = _number(numbers.pop(0), "integer" if kind == "integer" else "float")
        elif kind == "boolean":
            args[name] = name.replace("_", " ") in text.lower()
        elif kind in ("array", "tuple"):
            item = str((spec.get("items") or {}).get("type", "string"))
            if item in ("integer", "float", "number") and numbers:
                args[name] = [_number(n, item) for n in numbers]
                numbers = []
            elif proper:
                args[name] = list(proper)
            else:
                return None
        elif kind == "string":
            if quoted:
                args[name] = quoted.pop(0)
            elif proper:
                args[name] = proper.pop(0)
            else:
                return None
        else:
            args[name] = {}
    return args


def _clauses(text: str, category: str) -> list[str]:
    if "parallel" not in category:
        return [text]
    parts = [p.strip(" ,.?") for p in _SPLIT.split(text) if len(p.strip(" ,.?")) > 3]
    return parts or [text]


def answer(item: Item) -> dict[str, Any]:
    """The student's assistant message for ``item``: tool calls, or plain text when none applies."""
    text = " ".join(str(m.get("content") or "") for m in item.messages if m.get("role") == "user")
    calls = []
    for clause in _clauses(text, item.category):
        function, overlap = _best(item.functions, clause)
        if function is None or overlap < MIN_OVERLAP:
            function, overlap = _best(item.functions, text)
        if function is None or overlap < MIN_OVERLAP:
            continue
        args = _fill(function.get("parameters") or {}, clause)
        if args is None:
            args = _fill(function.get("parameters") or {}, text) or {}
        calls.append((function["name"], args))
    if not calls:
        return {"role": "assistant", "content": "None of the given functions applies to this request."}
    return tool_call_message(item, [{name: args} for name, args in calls])
