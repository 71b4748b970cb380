"""``json_schema``: the answer must be JSON valid against a schema (config or ``response_format``).

Also home of the small helpers the other verifiers share: :func:`message_text`, :func:`parse_json`.
Schemas are checked and applied by routing/schemas.py (bounded in size and cost, local references
only, linear-time patterns). No regular expression runs on the answer: the code fence is taken off by
plain string operations (:func:`unfenced`), linear in the answer's length whatever its blank runs.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from routing.fences import unfenced
from routing.json_body import loads_answer
from routing.schemas import schema_errors, schema_problem
from routing.verifiers.base import Verdict, Verifier, VerifierConfigError, register


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
    fenced = unfenced(text)
    if fenced is not None:
        text = fenced
    try:
        return loads_answer(text, parse_constant=_reject_constant), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except ValueError as exc:
        return None, f"not valid JSON: {exc}"


INLINE_TEXT_CHARS = 4 * 1024
INLINE_SCHEMA_BYTES = 2 * 1024
_COSTLY_KEYWORDS = (
    b'"pattern"',
    b'"patternProperties"',
    b'"format"',
    b'"$ref"',
    b'"$dynamicRef"',
    b'"$recursiveRef"',
    b'"anyOf"',
    b'"oneOf"',
    b'"multipleOf"',  # big-number division: 14 ms for one 4,000-digit integer and multipleOf 1e-300
)
# Schema values (commas and colons of its JSON) x answer elements (at most half its characters) a check
# may reach and still run inline: about 1-5 ms of jsonschema-rs on a loaded 2-core machine. Past it (300
# nested "not", or an enum of 300 values, on 2,000 array items: 12-40 ms) the check goes to a worker.
INLINE_CHECKS = 50_000
NOT_THE_CALLERS = (
    "the request's json_schema does not judge this profile's answers (the key lacks the "
    "'verifiers:call' scope): checked as a JSON object"
)


def inline_schema(schema: Any, answer_chars: int = INLINE_TEXT_CHARS) -> bool:
    """Whether validating an answer of ``answer_chars`` against ``schema`` is bounded and tiny: a small
    schema without regular expressions, formats, references, alternatives or big-number division, whose
    values times the answer's possible elements stay within :data:`INLINE_CHECKS`."""
    try:
        text = orjson.dumps(schema)
    except TypeError:
        return False
    if len(text) > INLINE_SCHEMA_BYTES or any(word in text for word in _COSTLY_KEYWORDS):
        return False
    return (1 + text.count(b",") + text.count(b":")) * max(1, answer_chars // 2) <= INLINE_CHECKS


@register
class JsonSchemaVerifier(Verifier):
    """Config: optional ``schema``. Without it the request's ``response_format`` decides: a
    ``json_schema`` format supplies the schema, ``json_object`` requires any JSON object.
    ``use_request_schema: false`` (routing/verifiers/policy.py sets it on a profile's verifier for a
    key without the ``verifiers:call`` scope): the request's schema is not used, the answer must be a
    JSON object; a caller never picks the schema, and so the verdict, of the profile's verifier."""

    kind = "json_schema"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.schema: dict[str, Any] | bool | None = config.get("schema")
        if self.schema is not None:
            problem = schema_problem(self.schema)
            if problem:
                raise VerifierConfigError(f"json_schema.schema is not a valid JSON schema: {problem}")

    def runs_inline(self, *, request: dict[str, Any], message: dict[str, Any]) -> bool:
        """A short answer against a small schema without patterns, formats, references or
        alternatives (microseconds); every other check goes to a worker process."""
        chars = len(message_text(message))
        if chars > INLINE_TEXT_CHARS:
            return False
        schema, _ = self._schema_for(request)
        return schema is None or inline_schema(schema, chars)

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
            return Verdict(
                True, NOT_THE_CALLERS if self._ignores_request_schema(request) else "valid JSON object"
            )
        reason = schema_errors(schema, value)
        return Verdict(False, reason) if reason else Verdict(True, "valid against the schema")

    def _schema_for(self, request: dict[str, Any]) -> tuple[dict[str, Any] | bool | None, str | None]:
        """(schema, None); (None, None) for "any JSON object"; (None, problem) when nothing applies."""
        if self.schema is not None:
            return self.schema, None
        fmt = request.get("response_format")
        fmt_type = fmt.get("type") if isinstance(fmt, dict) else None
        if fmt_type == "json_object" or self._ignores_request_schema(request):
            return None, None
        if fmt_type == "json_schema":
            spec = fmt.get("json_schema") if isinstance(fmt, dict) else None
            schema = spec.get("schema") if isinstance(spec, dict) else None
            problem = schema_problem(schema)
            if problem:
                return None, f"request response_format.json_schema.schema is unusable: {problem}"
            return schema, None
        return None, "no schema to check against: set verifier.schema or a json response_format"

    def _ignores_request_schema(self, request: dict[str, Any]) -> bool:
        fmt = request.get("response_format")
        return (
            self.config.get("use_request_schema", True) is False
            and isinstance(fmt, dict)
            and fmt.get("type") == "json_schema"
        )
