"""Which answers of a best-of-n leg say the same thing: the key answers are grouped by to count votes.

A backend with ``min_votes`` > 1 (routing/models.py) passes a leg only when that many of its sampled
answers pass the verifier *and* agree (routing/call/legs.py): self-consistency, a check of the model's own
confidence that needs no second model. Two answers agree when they make the same calls with the same
values, whatever the order of the calls, of an object's keys, the case of a text or its spacing; or,
without calls, when they hold the same JSON value, or the same words. An answer longer than
:data:`MAX_PARSED_CHARS` is compared as its words alone (calls included, in their order): parsing and
normalising its JSON is Python work under the GIL, in the serving process, that grows with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

from routing.json_body import loads_answer
from routing.verifiers.tool_text import TextCallError, written_calls

# A 1 MB JSON answer of 400,000 values took 260-320 ms of CPU to key (h37's probe), per passing sample.
MAX_PARSED_CHARS = 64 * 1024


def answer_key(message: dict[str, Any]) -> str:
    """The normalized content of an assistant message, equal for answers that agree."""
    calls = message.get("tool_calls") or []
    content = message.get("content")
    functions = [(c.get("function") or {}) if isinstance(c, dict) else {} for c in calls]
    said = [content, *([f.get("name"), f.get("arguments")] for f in functions if isinstance(f, dict))]
    if sum(len(str(part)) for part in said) > MAX_PARSED_CHARS:  # str() of each part: C speed
        words = " ".join("\x1f".join(map(str, said)).casefold().split())
        return "long:" + hashlib.sha256(words.encode("utf-8", "surrogatepass")).hexdigest()
    if calls:
        return _calls_key([(call or {}).get("function") for call in calls if isinstance(call, dict)])
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
    try:
        written, _ = written_calls(text)
    except TextCallError:
        written = []
    if written:
        return _calls_key(written)
    try:
        return "json:" + _dump(loads_answer(text))
    except ValueError:  # not JSON, or nested past ANSWER_MAX_DEPTH: compared as its words
        return "text:" + " ".join(text.casefold().split())


def _calls_key(functions: list[Any]) -> str:
    calls = []
    for function in functions:
        if not isinstance(function, dict):
            calls.append(_dump(function))
            continue
        arguments = function.get("arguments", function.get("parameters", {}))
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # unreadable or too deep: compared as their text
                arguments = loads_answer(arguments)
        calls.append(_dump([function.get("name"), arguments]))
    return "calls:" + json.dumps(sorted(calls))


def _dump(value: Any) -> str:
    return json.dumps(_normalized(value), sort_keys=True, ensure_ascii=False)


def _normalized(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.casefold().split())
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        try:
            return float(value)  # 5 and 5.0 agree
        except OverflowError:  # an integer past float's range: compared exactly
            return str(value)
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _normalized(v) for k, v in value.items()}
    return str(value)
