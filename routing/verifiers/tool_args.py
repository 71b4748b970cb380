"""``tool_args``: the message's tool calls must name declared function tools with valid arguments.

Optional, per profile: ``content_calls`` reads calls a model writes in its text (Hermes blocks, a bare
``{"name", "arguments"}`` object) when the message has no ``tool_calls``; ``check_values`` also asks
that the values be grounded in the conversation and that the request's values reach the call
(routing/verifiers/tool_grounding.py).
"""

from __future__ import annotations

import json
from typing import Any

from routing.json_body import loads_answer
from routing.schemas import schema_errors, schema_problem
from routing.verifiers.base import Verdict, Verifier, VerifierConfigError, register
from routing.verifiers.json_schema import INLINE_TEXT_CHARS, inline_schema
from routing.verifiers.tool_grounding import (
    Evidence,
    conversation_text,
    copied_names,
    declaration_text,
    keys,
    leaves,
    message_text,
    stems_of,
    unchosen,
    uncovered,
    unflagged,
    ungrounded,
)
from routing.verifiers.tool_text import TextCallError, as_tool_calls, cut_short, written_calls

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


def _forced_function(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        return name if isinstance(name, str) else None
    return None


def _functions(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Function name -> its declaration, from the request's OpenAI ``tools``."""
    declared: dict[str, dict[str, Any]] = {}
    for tool in request.get("tools") or []:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            declared[function["name"]] = function
    return declared


def _declared_functions(request: dict[str, Any]) -> dict[str, Any]:
    """Function name -> its ``parameters`` schema."""
    return {name: f.get("parameters") or _ANY_OBJECT for name, f in _functions(request).items()}


@register
class ToolArgsVerifier(Verifier):
    """Config: optional ``require_tool_call`` (bool); by default a call is required when the request's
    ``tool_choice`` is ``"required"`` or names a function. ``content_calls`` and ``check_values``
    (bools, default false): see the module's docstring."""

    kind = "tool_args"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        for name in ("require_tool_call", "content_calls", "check_values"):
            value = config.get(name)
            if value is not None and not isinstance(value, bool):
                raise VerifierConfigError(f"tool_args.{name} must be a boolean; got {value!r}")
        self.require_tool_call: bool | None = config.get("require_tool_call")
        self.content_calls = bool(config.get("content_calls"))
        self.check_values = bool(config.get("check_values"))

    def runs_inline(self, *, request: dict[str, Any], message: dict[str, Any]) -> bool:
        """Short arguments against small parameter schemas without regular expressions."""
        calls = message.get("tool_calls") or []
        size = sum(len(str((call or {}).get("function", {}).get("arguments", ""))) for call in calls)
        declared = _declared_functions(request)
        if self.check_values or self.content_calls:  # they read the conversation and the answer's text
            size += len(str(message.get("content") or "")) + sum(
                len(str(m.get("content") or "")) for m in request.get("messages") or [] if isinstance(m, dict)
            )
        return size <= INLINE_TEXT_CHARS and all(
            inline_schema(schema or {}, size) for schema in declared.values()
        )

    def verify(self, *, request: dict[str, Any], message: dict[str, Any]) -> Verdict:
        tool_choice = request.get("tool_choice")
        forced = _forced_function(tool_choice)
        require = self.require_tool_call
        if require is None:
            require = tool_choice == "required" or forced is not None
        calls = message.get("tool_calls") or []
        if not calls and self.content_calls:
            text = message_text(message)
            try:
                calls = as_tool_calls(written_calls(text)[0])
            except TextCallError as exc:
                return Verdict(False, str(exc))
            if not calls and _functions(request) and cut_short(text):
                return Verdict(False, "the answer starts a call written as JSON but does not finish it")
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
        if not problems and self.check_values:
            problems = _value_problems(request, calls)
        if problems:
            return Verdict(False, "; ".join(problems))
        return Verdict(True, f"{len(calls)} tool call(s) valid")


def _value_problems(request: dict[str, Any], calls: list[Any]) -> list[str]:
    """Schema-valid calls whose values the conversation does not hold, or that leave out what the
    user's last message gives (only when the calls answer that message directly)."""
    functions = _functions(request)
    raw_messages = request.get("messages")
    messages: list[Any] = raw_messages if isinstance(raw_messages, list) else []
    parsed = [loads_answer(call["function"]["arguments"]) for call in calls]
    seen: dict[str, int] = {}
    for i, (call, arguments) in enumerate(zip(calls, parsed, strict=True)):
        same = json.dumps([call["function"]["name"], arguments], sort_keys=True)
        if same in seen:
            return [f"tool_calls[{i}] repeats tool_calls[{seen[same]}]"]
        seen[same] = i
    said = conversation_text(messages)
    said_stems = stems_of(said)
    said_present = set(said_stems)
    evidence = Evidence(said)
    problems: list[str] = []
    values, declarations = Evidence(""), Evidence("")
    grounding: dict[str, Evidence] = {}  # per function: the conversation and its declaration, names aside
    for i, (call, arguments) in enumerate(zip(calls, parsed, strict=True)):
        name = call["function"]["name"]
        if name not in grounding:
            grounding[name] = Evidence(declaration_text(functions[name], names=False))
            grounding[name].update(evidence)
            declarations.update(Evidence(declaration_text(functions[name])))
        missing = ungrounded(arguments, grounding[name])
        missing += copied_names(arguments, functions[name], said_stems, said_present)
        if missing:
            problems.append(f"tool_calls[{i}]: {name}: {', '.join(missing)} not in the conversation")
        values.update(Evidence(" ".join(str(v) for v in [*leaves(arguments), *keys(arguments)])))
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if not problems and last.get("role") == "user":
        text = message_text(last)
        missing = uncovered(text, values, declarations)
        if missing:
            problems.append(f"the request gives {', '.join(map(repr, missing))}, which no call carries")
        by_function: dict[str, list[dict[str, Any]]] = {}
        for call, arguments in zip(calls, parsed, strict=True):
            by_function.setdefault(call["function"]["name"], []).append(arguments)
        for name, arguments in by_function.items():
            for choice in unchosen(text, functions[name], arguments):
                problems.append(f"{name}: the request names {choice}, which no call passes")
            for flag in unflagged(text, functions[name], arguments):
                problems.append(f"{name}: the request asks for {flag}, which no call sets true")
    return problems


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
