"""Whether a proposed action may be recorded: on the environment's allow-list, its arguments valid against
the action's schema, not proposed twice in one investigation. Plain data in, a reason (or "") out."""

from __future__ import annotations

from typing import Any

from diagnostics.toolsets.base import ToolSpec, validation_error


def invalid_proposal(
    action: str, args: dict[str, Any], actions: list[ToolSpec], proposed: list[tuple[str, dict[str, Any]]]
) -> str:
    spec = next((a for a in actions if a.name == action), None)
    if spec is None:
        return f"{action!r} is not an allowed action here"
    problem = validation_error(spec.parameters, args)
    if problem:
        return f"invalid arguments: {problem}"
    if (action, args) in proposed:
        return "already proposed"
    return ""
