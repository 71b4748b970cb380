"""JSON Schemas from callers, treated as data: bounded, self-contained, with linear-time patterns.

A caller's schema (``response_format``, Responses' ``text.format``, Anthropic's ``output_config.format``,
a tool's ``parameters`` / ``input_schema``, a per-call verifier) is checked once at the edge, where a
refusal is a 400 in the caller's protocol naming the field, and every verifier validates answers with
the same compiled validator. The rules:

- **No references leave the schema.** ``$ref`` / ``$dynamicRef`` / ``$recursiveRef`` must be local
  (``#...``), and the validator's retriever refuses every URI, so no URL is fetched and no file is read
  whatever ``$id`` says; a reference that does not resolve is refused at the edge, never a 500 later.
- **Patterns run in linear time.** Validation is jsonschema-rs (Rust) with its ``regex`` engine
  (RE2-like: no backtracking, so no catastrophic pattern; lookaround and backreferences are refused as
  "not a regex"), each pattern at most :data:`MAX_PATTERN_CHARS` characters and its compiled program
  capped by :data:`REGEX_SIZE_LIMIT` bytes.
- **Size is bounded before any work.** At most :data:`MAX_SCHEMA_BYTES` bytes of JSON and
  :data:`MAX_SUBSCHEMAS` objects; the meta-schema check and compilation then take milliseconds.

Compiled validators are cached by the schema's JSON (the edge check and the verifier share one).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jsonschema_rs
import orjson

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SUBSCHEMAS = 5000  # OpenAI's structured outputs allow 5,000 object properties in all
MAX_PATTERN_CHARS = 1000
REGEX_SIZE_LIMIT = 1 << 20  # bytes of one compiled pattern (and of its lazy DFA)
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
_PATTERNS = jsonschema_rs.RegexOptions(size_limit=REGEX_SIZE_LIMIT, dfa_size_limit=REGEX_SIZE_LIMIT)


class SchemaRefused(ValueError):
    """The schema cannot be used; the message says why, fit for the caller."""


def _no_retrieval(uri: str) -> Any:
    raise SchemaRefused(f"references outside the schema are not followed ({uri[:100]})")


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot be used (see the module's rules), or None."""
    try:
        validator(schema)
    except SchemaRefused as refused:
        return str(refused)
    return None


def schema_errors(schema: Any, instance: Any) -> str | None:
    """None when ``instance`` is valid against a usable ``schema``, else one line naming the first
    failing path and the reason (also when the schema itself is unusable)."""
    try:
        compiled = validator(schema)
    except SchemaRefused as refused:
        return f"the schema is unusable: {refused}"
    errors = compiled.iter_errors(instance)
    first = next(errors, None)
    if first is None:
        return None
    more = sum(1 for _ in errors)
    return f"at {_json_path(first.instance_path)}: {first.message}" + (f" (+{more} more)" if more else "")


def validator(schema: Any) -> jsonschema_rs.Validator:
    """The compiled validator of a usable ``schema``; :class:`SchemaRefused` otherwise."""
    if isinstance(schema, bool):
        return _compiled(orjson.dumps(schema))
    if not isinstance(schema, dict):
        raise SchemaRefused(f"must be an object, got {type(schema).__name__}")
    try:
        text = orjson.dumps(schema)
    except TypeError as exc:  # not JSON (a value only a Python caller could pass)
        raise SchemaRefused(f"is not JSON: {exc}") from None
    if len(text) > MAX_SCHEMA_BYTES:
        raise SchemaRefused(f"is {len(text)} bytes of JSON; at most {MAX_SCHEMA_BYTES} are allowed")
    return _compiled(text)


@lru_cache(maxsize=256)
def _compiled(text: bytes) -> jsonschema_rs.Validator:
    schema = orjson.loads(text)
    _check_shape(schema)
    try:
        return jsonschema_rs.validator_for(
            schema, retriever=_no_retrieval, pattern_options=_PATTERNS, validate_formats=True
        )
    except jsonschema_rs.ValidationError as exc:  # the meta-schema, a pattern, a reference
        where = _json_path(exc.instance_path)
        raise SchemaRefused(f"{exc.message.splitlines()[0]} (at {where})") from None
    except (ValueError, TypeError) as exc:
        raise SchemaRefused(str(exc).splitlines()[0]) from None


def _check_shape(schema: Any) -> None:
    """The bounds compilation itself cannot keep: object count, reference targets, pattern sizes
    (one pass over the schema, no recursion)."""
    stack, objects = [schema], 0
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        objects += 1
        if objects > MAX_SUBSCHEMAS:
            raise SchemaRefused(f"holds more than {MAX_SUBSCHEMAS} objects")
        for key in _REFERENCES:
            target = item.get(key)
            if isinstance(target, str) and not target.startswith("#"):
                raise SchemaRefused(f"{key} must point inside the schema ('#...'), not to {target[:100]!r}")
        pattern = item.get("pattern")
        if isinstance(pattern, str) and len(pattern) > MAX_PATTERN_CHARS:
            raise SchemaRefused(f"a pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}")
        properties = item.get("patternProperties")
        if isinstance(properties, dict) and any(len(p) > MAX_PATTERN_CHARS for p in properties):
            raise SchemaRefused(f"a patternProperties pattern is longer than {MAX_PATTERN_CHARS} characters")
        stack.extend(item.values())


def _json_path(parts: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
