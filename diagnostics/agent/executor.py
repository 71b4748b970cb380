"""The Executor: the only holder of WriteToolsets. It runs an ActionRequest only when

- it was approved by someone allowed to approve, who is not involved in the incident (its requester,
  the owner of the key or the Slack member that opened it, anyone who touched it),
- it has not expired,
- its plan (tool, args and the incident's environment: name and options) still hashes to the plan
  that was proposed and approved, and the environment the caller built is that one,
- the action is on the environment's allow-list and its arguments match the action's schema;

it claims the request with a conditional UPDATE (so a double approval or a redelivered task runs it
once), records who/when/result, then re-checks the health the action was meant to restore.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jsonschema import Draft202012Validator

from diagnostics import services
from diagnostics.models import ActionRequest
from diagnostics.toolsets.base import ToolSpec, WriteToolset

TARGET_KEYS = ("target", "service", "name", "deployment", "process", "workload", "app", "resource")


def health_target(args: dict[str, Any]) -> str:
    return next((str(args[k]) for k in TARGET_KEYS if args.get(k)), "")


class Executor:
    __slots__ = ("_allowed",)

    def __init__(self, toolsets: Sequence[WriteToolset]) -> None:
        allowed: dict[str, tuple[WriteToolset, ToolSpec]] = {}
        for toolset in toolsets:
            if not isinstance(toolset, WriteToolset):
                raise TypeError(f"The Executor takes write toolsets; {type(toolset).__name__} is not one.")
            for spec in toolset.actions():
                allowed.setdefault(spec.name, (toolset, spec))
        self._allowed = allowed

    def allowed_actions(self) -> list[ToolSpec]:
        return [spec for _, spec in self._allowed.values()]

    def execute(
        self,
        *,
        action_request_id: int,
        environment: str | None = None,
        environment_options: dict[str, Any] | None = None,
    ) -> ActionRequest | None:
        """Runs the action if (and only if) it may run; returns the updated request, or None when
        it was not claimable (not approved, expired, changed, already claimed).

        ``environment`` / ``environment_options``: what the write toolsets were built from; the
        approved plan hash must cover exactly that environment.
        """
        action = services.action_request_claim_execution(
            action_request_id=action_request_id,
            environment=environment,
            environment_options=environment_options,
        )
        if action is None:
            return None
        if not services.action_request_plan_intact(action=action):
            return services.action_request_refuse(action=action, reason="the plan changed after approval")
        entry = self._allowed.get(action.tool)
        if entry is None:
            return services.action_request_refuse(
                action=action, reason=f"{action.tool!r} is not on this environment's allow-list"
            )
        toolset, spec = entry
        errors = list(Draft202012Validator(spec.parameters).iter_errors(action.args))
        if errors:
            return services.action_request_refuse(
                action=action, reason=f"invalid arguments: {errors[0].message}"
            )
        try:
            result = toolset.run(action.tool, dict(action.args))
            ok, output = result.ok, result.output
        except Exception as exc:  # the action failed; record it rather than crash the worker
            ok, output = False, f"{type(exc).__name__}: {exc}"
        health: dict[str, Any] = {}
        try:
            verdict = toolset.health(health_target(action.args))
            health = {"healthy": verdict.healthy, "detail": verdict.detail}
        except Exception as exc:
            health = {"healthy": False, "detail": f"health check failed: {type(exc).__name__}: {exc}"}
        return services.action_request_finish(action=action, ok=ok, output=output, health=health)
