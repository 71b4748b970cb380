"""Whether a tool call's argument values come from the conversation, and the request's values reach the call.

A schema check passes a well-typed call with invented values. Two checks catch most of those, with no
model and in well under a millisecond:

- **grounded**: every string and number the call passes appears in the conversation's messages (system
  messages excepted: they hold instructions, and a tool's docs are counted per function) or in the called
  function's own declaration (its description, enums, defaults). A string counts when half its words do;
  numbers compare as numbers, so ``"2022-01-01"`` is grounded in "January 1, 2022".
- **covered**: when the call answers the user's last message directly, every number, quoted text and
  capitalised name in that message appears in some call's values, or in the called functions'
  declarations (a unit, or the function's own name). A request for two cities answered by one call
  fails here. So does a parameter with declared choices (an enum, or the quoted values its description
  offers) when the message names one of them and no call of that function passes it ("using simpson
  method", and the call says ``"trapezoid"`` or leaves the default). An array's item enum counts as its
  choices. A boolean parameter the message names, not negated ("including human impact" for
  ``include_human_impact``), must be set true by some call.
- **not copied**: a string value that is the function's own name or one of its parameters' names, which
  the conversation does not say, was copied from the schema ("cell_type": "cell_type").

Both are heuristics on purpose. A value derived from the request (a unit conversion, a computed date)
fails them, and the call then falls back to the teacher: a false failure costs a teacher call, never a
wrong answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from core import number_words

# Any number in evidence; a number the request states (not an exponent, not part of a name like "A4").
_NUMBER = re.compile(r"(-?\d+(?:,\d{3})*(?:\.\d+)?)(?:\s*(thousand|million|billion|[kKmM]\b))?")
_SCALE = {"thousand": 1e3, "k": 1e3, "million": 1e6, "m": 1e6, "billion": 1e9}
_STATED = re.compile(r"(?<![\w.^])(-?\d+(?:,\d{3})*(?:\.\d+)?)(?:\s*(thousand|million|billion|[kKmM]\b))?")
_LIST_MARKER = re.compile(r"[.)]\s")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_QUOTED = re.compile(r"[\"“]([^\"”\n]{2,80})[\"”]|(?<!\w)'([^'\n]{2,80})'(?!\w)")
# A run of capitalised words (those that start a sentence are dropped in ``mentions``).
_NAME = re.compile(r"\b([A-Z][\w'’-]*(?:[ \t]+(?:of[ \t]+|de[ \t]+)?[A-Z][\w'’-]*)*)")
_SENTENCE_END = ".!?:;\n"
# What a number said in words grounds: the cardinals, and the words that mean a count or a rate.
NUMBER_WORDS: dict[str, float] = {
    **number_words.CARDINALS,
    "dozen": 12,
    "half": 0.5,
    "quarter": 0.25,
    "single": 1,
    "once": 1,
    "twice": 2,
    "double": 2,
    "triple": 3,
    "pair": 2,
    "first": 1,
    "second": 2,
    "third": 3,
    "monthly": 12,
    "quarterly": 4,
    "weekly": 52,
    "daily": 365,
    "hourly": 24,
}
MONTHS = {
    m: i + 1
    for i, m in enumerate(
        "january february march april may june july august september october november december".split()
    )
}
MONTHS.update({m[:3]: i for m, i in list(MONTHS.items())})
# Capitalised words that name nothing ("I", "Also", "Who"): never a mention a call must carry.
NOT_NAMES = frozenset(
    """i im ive id ill me my we our you your he she they it this that these those a an the and or but so
    also then first second next finally now ok okay please thanks thank hi hello hey yes no not who what
    when where which why how can could would should will shall may might must do does did is are was were
    be have has had let lets given if after before in on at for of to from with by""".split()
)
# Numbers a call may always pass: counters, flags and offsets that nobody says out loud.
FREE_NUMBERS = frozenset({0.0, 1.0})


class Evidence:
    """The words and numbers of some text, for membership tests."""

    def __init__(self, text: str) -> None:
        self.words = {stem(w) for w in words(text)}
        named = set(words(text))
        self.numbers = numbers(text) | {_key(NUMBER_WORDS[w]) for w in named & NUMBER_WORDS.keys()}
        self.numbers |= {float(MONTHS[w]) for w in named & MONTHS.keys()}

    def update(self, other: Evidence) -> None:
        self.words |= other.words
        self.numbers |= other.numbers

    def has_number(self, value: float) -> bool:
        """The number, its magnitude (112.07 W is -112.07), or it as a percentage (5% is 0.05), or back."""
        value = abs(value)
        return any(_key(v) in self.numbers for v in (value, value * 100, value / 100))

    def share_of(self, text: str) -> float:
        """The share of ``text``'s words found here (numeric words as numbers)."""
        found = [self.has_word(w) for w in words(text)]
        return sum(found) / len(found) if found else 1.0

    def has_word(self, word: str) -> bool:
        if stem(word) in self.words:
            return True
        value = _as_number(word)
        if value is None:
            value = MONTHS.get(word, NUMBER_WORDS.get(word))
        return value is not None and self.has_number(value)


def words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def stem(word: str) -> str:
    """A plural's singular, crudely: "schisms" and "schism" are one word here."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def numbers(text: str) -> set[float]:
    """Each number's magnitude (rounded, so that 0.05 * 100 is 5), and scaled where a word says so
    ("$2 million": 2 and 2,000,000)."""
    out = set()
    for digits, scale in _NUMBER.findall(text):
        value = _as_number(digits.replace(",", ""))
        if value is not None:
            out.add(_key(abs(value)))
            if scale:
                out.add(_key(abs(value) * _SCALE[scale.lower()]))
    return out


def _key(value: float) -> float:
    return float(f"{value:.9g}")


def _as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item)
    else:
        yield value


def keys(value: Any) -> Iterator[str]:
    """The keys of every object in ``value`` (a dict argument's keys are values the request gave)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from keys(item)


def declaration_text(function: dict[str, Any], *, names: bool = True) -> str:
    """A declared function's description, its parameters' descriptions, enums and defaults, and (with
    ``names``) its own and its parameters' names. A value grounded only in a name was copied from the
    schema's keys ("cell_type": "cell_type"), not given: grounding reads the declaration without them."""
    parts = [str(function.get("name") or "").replace("_", " ")] if names else []
    parts.append(str(function.get("description") or ""))

    def walk(schema: Any) -> None:
        if isinstance(schema, dict):
            for key, value in schema.items():
                if key in ("description", "title", "default", "enum", "examples", "const"):
                    parts.extend(str(v) for v in leaves(value))
                elif key == "properties" and isinstance(value, dict):
                    if names:
                        parts.extend(name.replace("_", " ") for name in value)
                    walk(value)
                else:
                    walk(value)
        elif isinstance(schema, list):
            for item in schema:
                walk(item)

    walk(function.get("parameters"))
    return " ".join(parts)


def conversation_text(messages: list[Any]) -> str:
    """The text of every non-system message (content parts included, and earlier tool calls' arguments)."""
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") in ("system", "developer"):
            continue
        parts.append(message_text(message))
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                parts.append(str(function.get("arguments") or ""))
    return "\n".join(parts)


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def ungrounded(arguments: Any, evidence: Evidence) -> list[str]:
    """The call's string and number values that the evidence does not hold (at most 3)."""
    missing: list[str] = []
    for value in leaves(arguments):
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int | float):
            if abs(float(value)) not in FREE_NUMBERS and not evidence.has_number(float(value)):
                missing.append(repr(value))
        elif isinstance(value, str) and words(value) and evidence.share_of(value) < 0.5:
            missing.append(repr(value[:40]))
        if len(missing) >= 3:
            break
    return missing


def copied_names(arguments: Any, function: dict[str, Any], stems: list[str], present: set[str]) -> list[str]:
    """String values that are the function's own name or one of its parameters' names, and that the
    conversation (``stems``: its words' stems in order; ``present``: their set) does not say
    ("cell_type": "cell_type"): copied from the schema, not given."""
    properties = (function.get("parameters") or {}).get("properties")
    names = [str(function.get("name") or ""), *(properties if isinstance(properties, dict) else [])]
    identifiers = {tuple(words(name)) for name in names} - {()}
    return [
        repr(value[:40])
        for value in leaves(arguments)
        if isinstance(value, str)
        and tuple(words(value)) in identifiers
        and not _phrase_in(value, stems, present)
    ][:3]


# Words that say a flag is off ("without air resistance", "no tax"), and name words that say only what a
# flag does ("include_human_impact" is named by "human impact").
_NEGATIONS = frozenset(
    "no not don doesn didn isn aren never without few little less hardly rarely neglect neglecting ignore"
    " ignoring exclude excluding except non".split()
)
_FLAG_VERBS = frozenset("include is has use enable show with get return allow add consider apply".split())


def unflagged(
    request_text: str, function: dict[str, Any], calls_arguments: list[dict[str, Any]]
) -> list[str]:
    """Boolean parameters of ``function`` that the request names, not negated ("including human impact"
    for ``include_human_impact``; "detailed information" for ``detailed``), and that no call sets true."""
    properties = (function.get("parameters") or {}).get("properties")
    if not isinstance(properties, dict):
        return []
    stems = stems_of(request_text)
    missing: list[str] = []
    for name, schema in properties.items():
        if not isinstance(schema, dict) or schema.get("type") != "boolean":
            continue
        target = [stem(w) for w in words(name.replace("_", " ")) if w not in _FLAG_VERBS]
        if not target or len(target) > 3:
            continue
        starts = _starts(target, stems)
        if not starts or all(_NEGATIONS & set(stems[max(0, i - 4) : i]) for i in starts):
            continue
        if not any(arguments.get(name) is True for arguments in calls_arguments):
            missing.append(name)
    return missing


def _after(text: str, start: int, skipped: str) -> str:
    """The character before ``start`` once ``skipped`` characters are passed over ("" at the start)."""
    i = start - 1
    while i >= 0 and text[i] in skipped:
        i -= 1
    return text[i] if i >= 0 else ""


def mentions(text: str) -> Iterator[tuple[str, str]]:
    """What a request gives that a call answering it should carry: ("number", "5"), ("text", "New York")."""
    for match in _STATED.finditer(text):
        if _after(text, match.start(), " \t") in ("", "\n") and _LIST_MARKER.match(text, match.end()):
            continue  # "1. ..." numbers a list
        yield ("number", match.group())
    for double, single in _QUOTED.findall(text):
        yield ("text", double or single)
    for match in _NAME.finditer(text):
        before = _after(text, match.start(), " \t\"'“‘([*-")
        named = [w for w in words(match.group(1)) if w not in NOT_NAMES and len(w) > 1]
        if named and before and before not in _SENTENCE_END:
            yield ("text", match.group(1))


_OFFERED = re.compile(r"['\"“‘]([^'\"”’\n]{1,40})['\"”’]")
_DEFAULT = re.compile(
    r"default(?:s)?(?:\s+value)?(?:\s+is|\s+to|\s*:|\s*=)?\s*['\"“‘]([^'\"”’\n]{1,40})['\"”’]", re.I
)


def choices(schema: Any) -> tuple[list[str], str | None]:
    """A string parameter's declared choices (its enum, else the quoted values its description offers; two
    or more) and its default (the schema's, else the one its description names)."""
    if not isinstance(schema, dict):
        return [], None
    items = schema.get("items")
    if schema.get("type") == "array" and isinstance(items, dict) and isinstance(items.get("enum"), list):
        schema = {**items, "description": schema.get("description"), "default": schema.get("default")}
    description = str(schema.get("description") or "")
    enum = schema.get("enum")
    offered = (
        [str(v) for v in enum if isinstance(v, str)]
        if isinstance(enum, list)
        else _OFFERED.findall(description)
    )
    default = schema.get("default")
    if not isinstance(default, str):
        named = _DEFAULT.search(description)
        default = named.group(1) if named else None
    return (offered if len(set(offered)) >= 2 else []), default


def stems_of(text: str) -> list[str]:
    return [stem(w) for w in words(text)]


def _starts(target: list[str], stems: list[str]) -> list[int]:
    """Where the word run ``target`` starts in ``stems``."""
    return [i for i in range(len(stems) - len(target) + 1) if stems[i : i + len(target)] == target]


def _phrase_in(phrase: str, stems: list[str], present: set[str]) -> bool:
    target = stems_of(phrase)
    return bool(target) and present.issuperset(target) and bool(_starts(target, stems))


def unchosen(request_text: str, function: dict[str, Any], calls_arguments: list[dict[str, Any]]) -> list[str]:
    """The parameters of ``function`` whose choices the request names but none of its calls passes."""
    properties = (function.get("parameters") or {}).get("properties")
    if not isinstance(properties, dict):
        return []
    stems = stems_of(request_text)
    present = set(stems)
    missing: list[str] = []
    for name, schema in properties.items():
        offered, default = choices(schema)
        named = {c.casefold() for c in offered if _phrase_in(c, stems, present)}
        if not named:
            continue
        given: set[str] = set()
        for arguments in calls_arguments:
            value = arguments.get(name, default)
            given |= {
                str(v).casefold() for v in (value if isinstance(value, list) else [value]) if v is not None
            }
        if not given & named:
            missing.append(f"{name} ({' or '.join(sorted(named))})")
    return missing


def uncovered(request_text: str, calls_values: Evidence, declarations: Evidence) -> list[str]:
    """The request's mentions that no call's values carry and no called function declares (at most 3)."""
    missing: list[str] = []
    for kind, mention in mentions(request_text):
        if kind == "number":  # "2 million" is carried as 2 or as 2,000,000
            if any(calls_values.has_number(v) or declarations.has_number(v) for v in numbers(mention)):
                continue
        else:
            tokens = words(mention)
            if not tokens or any(calls_values.has_word(w) or declarations.has_word(w) for w in tokens):
                continue
        if mention not in missing:
            missing.append(mention)
        if len(missing) >= 3:
            break
    return missing
