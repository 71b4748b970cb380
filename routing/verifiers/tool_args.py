"""``tool_args``: the message's tool calls must name declared function tools with valid arguments."""

from __future__ import annotations

import json
from typing import Any

from routing.json_body import loads_answer
from routing.verifiers.base import Verdict, Verifier, VerifierConfigError, register
from routing.verifiers.json_schema import INLINE_TEXT_CHARS, inline_schema, schema_errors, schema_problem

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


def _forced_function(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        return name if isinstance(name, str) else None
    return None


def _declared_functions(request: dict[str, Any]) -> dict[str, Any]:
    """Function name -> its ``parameters`` schema, from the request's OpenAI ``tools``."""
    declared: dict[str, Any] = {}
    for tool in request.get("tools") or []:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            declared[function["name"]] = function.get("parameters") or _ANY_OBJECT
    return declared


@register
class ToolArgsVerifier(Verifier):
    """Config: optional ``require_tool_call`` (bool); by default a call is required when the request's
    ``tool_choice`` is ``"required"`` or names a function."""

    kind = "tool_args"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        require = config.get("require_tool_call")
        if require is not None and not isinstance(require, bool):
            raise VerifierConfigError(f"tool_args.require_tool_call must be a boolean; got {require!r}")
        self.require_tool_call: bool | None = require

    def runs_inline(self, *, request: dict[str, Any], message: dict[str, Any]) -> bool:
        """Short arguments against small parameter schemas without regular expressions."""
        calls = message.get("tool_calls") or []
        size = sum(len(str((call or {}).get("function", {}).get("arguments", ""))) for call in calls)
        declared = _declared_functions(request)
        return size <= INLINE_TEXT_CHARS and all(inline_schema(schema or {}) for schema in declared.values())

    def verify(self, *, request: dict[str, Any], message: dict[str, Any]) -> Verdict:
        tool_choice = request.get("tool_choice")
        forced = _forced_function(tool_choice)
        require = self.require_tool_call
        if require is None:
            require = tool_choice == "required" or forced is not None
        calls = message.get("tool_calls") or []
        if not calls:
            if require:
                return Verdict(False, "no tool call, but the request requires one")
            return Verdict(True, "no tool call (none required)")
        if tool_choice == "none":
            return Verdict(False, "tool_choice is 'none' but the message calls tools")
        declared = _declared_functions(request)
        problems = [
            f"tool_calls[{i}]: {problem}"
            for i, call in enumerate(calls)
            if (problem := _call_problem(call, declared, forced))
        ]
        if problems:
            return Verdict(False, "; ".join(problems))
        return Verdict(True, f"{len(calls)} tool call(s) valid")


def _call_problem(call: Any, declared: dict[str, Any], forced: str | None) -> str | None:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return "not a function call"
    name = function["name"]
    if forced is not None and name != forced:
        return f"calls {name!r} but tool_choice forces {forced!r}"
    if name not in declared:
        known = ", ".join(sorted(declared)) or "none"
        return f"unknown function {name!r} (declared: {known})"
    raw = function.get("arguments")
    if not isinstance(raw, str):
        return f"{name}: arguments must be a JSON string, got {type(raw).__name__}"
    try:
        arguments = loads_answer(raw)
    except json.JSONDecodeError as exc:
        return f"{name}: arguments are not valid JSON: {exc.msg} at column {exc.colno}"
    except ValueError as exc:
        return f"{name}: arguments are not valid JSON: {exc}"
    if not isinstance(arguments, dict):
        return f"{name}: arguments must be a JSON object, got {type(arguments).__name__}"
    schema = declared[name]
    problem = schema_problem(schema)
    if problem:
        return f"{name}: the declared parameters schema is unusable: {problem}"
    reason = schema_errors(schema, arguments)
    return f"{name}: {reason}" if reason else None
