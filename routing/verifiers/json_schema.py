"""``json_schema``: the answer must be JSON valid against a schema (config or ``response_format``).

Also home of the small helpers the other verifiers share: :func:`message_text`, :func:`parse_json`.
Schemas are checked and applied by routing/schemas.py (bounded, local references only, linear-time
patterns).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from routing.json_body import loads_answer
from routing.schemas import schema_errors, schema_problem
from routing.verifiers.base import Verdict, Verifier, VerifierConfigError, register

_FENCED_JSON = re.compile(r"\A\s*```[ \t]*(?:json)?[ \t]*\n(.*?)\n?[ \t]*```\s*\Z", re.DOTALL | re.IGNORECASE)


def message_text(message: dict[str, Any]) -> str:
    """The message's text: a string ``content``, or the text parts of a list ``content``."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "output_text")
        )
    return ""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str) -> tuple[Any, str | None]:
    """Parse ``text`` (optionally wrapped in one ```json fence); return (value, error)."""
    fenced = _FENCED_JSON.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        return loads_answer(text, parse_constant=_reject_constant), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except ValueError as exc:
        return None, f"not valid JSON: {exc}"


INLINE_TEXT_CHARS = 4 * 1024
INLINE_SCHEMA_BYTES = 8 * 1024
_REGEX_KEYWORDS = (b'"pattern"', b'"patternProperties"', b'"format"', b'"$ref"', b'"$dynamicRef"')


def inline_schema(schema: Any) -> bool:
    """Whether validating against ``schema`` is bounded by the answer's size: small, no regular
    expressions, formats or references."""
    try:
        text = orjson.dumps(schema)
    except TypeError:
        return False
    return len(text) <= INLINE_SCHEMA_BYTES and not any(word in text for word in _REGEX_KEYWORDS)


@register
class JsonSchemaVerifier(Verifier):
    """Config: optional ``schema``. Without it the request's ``response_format`` decides: a
    ``json_schema`` format supplies the schema, ``json_object`` requires any JSON object."""

    kind = "json_schema"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.schema: dict[str, Any] | bool | None = config.get("schema")
        if self.schema is not None:
            problem = schema_problem(self.schema)
            if problem:
                raise VerifierConfigError(f"json_schema.schema is not a valid JSON schema: {problem}")

    def runs_inline(self, *, request: dict[str, Any], message: dict[str, Any]) -> bool:
        """A short answer against a small schema without regular expressions (``pattern`` runs
        Python's backtracking ``re``; those checks stay in the pool)."""
        if len(message_text(message)) > INLINE_TEXT_CHARS:
            return False
        schema, _ = self._schema_for(request)
        return schema is None or inline_schema(schema)

    def verify(self, *, request: dict[str, Any], message: dict[str, Any]) -> Verdict:
        schema, problem = self._schema_for(request)
        if problem:
            return Verdict(False, problem)
        value, error = parse_json(message_text(message))
        if error:
            return Verdict(False, error)
        if schema is None:
            if not isinstance(value, dict):
                return Verdict(False, f"expected a JSON object, got {type(value).__name__}")
            return Verdict(True, "valid JSON object")
        reason = schema_errors(schema, value)
        return Verdict(False, reason) if reason else Verdict(True, "valid against the schema")

    def _schema_for(self, request: dict[str, Any]) -> tuple[dict[str, Any] | bool | None, str | None]:
        """(schema, None); (None, None) for "any JSON object"; (None, problem) when nothing applies."""
        if self.schema is not None:
            return self.schema, None
        fmt = request.get("response_format")
        fmt_type = fmt.get("type") if isinstance(fmt, dict) else None
        if fmt_type == "json_object":
            return None, None
        if fmt_type == "json_schema":
            spec = fmt.get("json_schema") if isinstance(fmt, dict) else None
            schema = spec.get("schema") if isinstance(spec, dict) else None
            problem = schema_problem(schema)
            if problem:
                return None, f"request response_format.json_schema.schema is unusable: {problem}"
            return schema, None
        return None, "no schema to check against: set verifier.schema or a json response_format"
