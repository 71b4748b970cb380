"""The Executor: the only holder of WriteToolsets. It runs an ActionRequest only when

- it was approved by someone allowed to approve, who is not involved in the incident (its requester,
  the owner of the key or the Slack member that opened it, anyone who touched it),
- it has not expired,
- its plan (tool, args and the incident's environment: name and options) still hashes to the plan
  that was proposed and approved, and the environment the caller built is that one,
- the action is on the environment's allow-list and its arguments match the action's schema;

it claims the request with a conditional UPDATE (so a double approval or a redelivered task runs it
once), records who/when/result, then re-checks the health the action was meant to restore. An
interrupted run is never run again: its recovery only re-checks the target (``recheck``).

Plain Python, no ORM: the approval rules, the claim and the record live behind the ``ActionLedger``
it is given (the incidents app's ``diagnostics.recording.DatabaseActionLedger``); the Executor
checks what it can check itself (allow-list, argument schema), runs the action once and reports.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from diagnostics.toolsets.base import ToolSpec, WriteToolset, validation_error

TARGET_KEYS = ("target", "service", "name", "deployment", "process", "workload", "app", "resource")


def health_target(args: dict[str, Any]) -> str:
    return next((str(args[k]) for k in TARGET_KEYS if args.get(k)), "")


@dataclass(frozen=True)
class ClaimedAction:
    """An approved action claimed for its one run: what will run (as approved)."""

    id: int
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Execution:
    """What became of a claimed action. ``status`` is the request's status as the ledger recorded it
    (e.g. ``executed``, ``failed``); ``refused`` says why it did not run, when it did not."""

    action_request_id: int
    status: str
    ok: bool
    output: str = ""
    health: dict[str, Any] = field(default_factory=dict)
    refused: str = ""


class ActionLedger(Protocol):
    """Where approved actions are claimed and their results recorded."""

    def claim(
        self,
        *,
        action_request_id: int,
        environment: str | None,
        environment_options: dict[str, Any] | None,
    ) -> ClaimedAction | None:
        """Claims the action for its one run when it may run (approved by someone allowed, not
        expired, plan unchanged, ``environment`` the approved one); None otherwise, or when another
        caller claimed it first."""
        ...

    def plan_intact(self, action: ClaimedAction) -> bool:
        """Whether the claimed plan, read again now, is still the approved one."""
        ...

    def refuse(self, action: ClaimedAction, *, reason: str) -> str:
        """Records that the claimed action will not run; returns the request's status."""
        ...

    def finish(self, action: ClaimedAction, *, ok: bool, output: str, health: dict[str, Any]) -> str:
        """Records the run's result and the health after it; returns the request's status."""
        ...


class Executor:
    __slots__ = ("_allowed", "_ledger")

    def __init__(self, toolsets: Sequence[WriteToolset], *, ledger: ActionLedger) -> None:
        allowed: dict[str, tuple[WriteToolset, ToolSpec]] = {}
        for toolset in toolsets:
            if not isinstance(toolset, WriteToolset):
                raise TypeError(f"The Executor takes write toolsets; {type(toolset).__name__} is not one.")
            for spec in toolset.actions():
                allowed.setdefault(spec.name, (toolset, spec))
        self._allowed = allowed
        self._ledger = ledger

    def allowed_actions(self) -> list[ToolSpec]:
        return [spec for _, spec in self._allowed.values()]

    def execute(
        self,
        *,
        action_request_id: int,
        environment: str | None = None,
        environment_options: dict[str, Any] | None = None,
    ) -> Execution | None:
        """Runs the action if (and only if) it may run; returns what became of it, or None when it
        was not claimable (not approved, expired, changed, already claimed).

        ``environment`` / ``environment_options``: what the write toolsets were built from; the
        approved plan hash must cover exactly that environment.
        """
        action = self._ledger.claim(
            action_request_id=action_request_id,
            environment=environment,
            environment_options=environment_options,
        )
        if action is None:
            return None
        if not self._ledger.plan_intact(action):
            return self._refuse(action, "the plan changed after approval")
        entry = self._allowed.get(action.tool)
        if entry is None:
            return self._refuse(action, f"{action.tool!r} is not on this environment's allow-list")
        toolset, spec = entry
        problem = validation_error(spec.parameters, action.args)
        if problem:
            return self._refuse(action, f"invalid arguments: {problem}")
        before = _system(toolset)  # the symptom as a whole before the fix: "worse" is judged against it
        try:
            result = toolset.run(action.tool, copy.deepcopy(action.args))
            ok, output = result.ok, result.output
        except Exception as exc:  # the action failed; record it rather than crash the worker
            ok, output = False, f"{type(exc).__name__}: {exc}"
        health: dict[str, Any] = {}
        try:
            verdict = toolset.health(health_target(action.args))
            health = {"healthy": verdict.healthy, "detail": verdict.detail}
        except Exception as exc:
            health = {"healthy": False, "detail": f"health check failed: {type(exc).__name__}: {exc}"}
        if before is not None:
            health["before"] = before
        status = self._ledger.finish(action, ok=ok, output=output, health=health)
        return Execution(action.id, status, ok, output, health)

    def recheck(self, *, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """The health of an action's target, read again without running anything: the recovery of
        a run whose worker died (it may or may not have run) decides on it instead of re-running."""
        entry = self._allowed.get(tool)
        if entry is None:
            return {"healthy": False, "detail": f"{tool!r} is not on this environment's allow-list"}
        try:
            verdict = entry[0].health(health_target(args))
        except Exception as exc:
            return {"healthy": False, "detail": f"health check failed: {type(exc).__name__}: {exc}"}
        return {"healthy": verdict.healthy, "detail": verdict.detail}

    def observe(self, *, tool: str, args: dict[str, Any], output: str) -> dict[str, Any]:
        """The verification of an executed fix: its target's health, the whole environment's health
        where the environment has such a check ("system", else None), and the action that would undo
        the fix ("inverse", else None). Nothing is run."""
        observed = self.recheck(tool=tool, args=args)
        entry = self._allowed.get(tool)
        observed["system"] = _system(entry[0], settle=True) if entry else None
        inverse = None
        if entry is not None:
            try:
                found = entry[0].inverse(tool, copy.deepcopy(args), output)
            except Exception:  # no inverse is a fine answer; a broken one must not stop the check
                found = None
            if found is not None and found[0] in self._allowed:
                inverse = {"tool": found[0], "args": found[1]}
        observed["inverse"] = inverse
        return observed

    def _refuse(self, action: ClaimedAction, reason: str) -> Execution:
        status = self._ledger.refuse(action, reason=reason)
        return Execution(action.id, status, False, refused=reason)


def _system(toolset: WriteToolset, *, settle: bool = False) -> dict[str, Any] | None:
    """The environment's own whole-system check, as plain data; None without one."""
    try:
        result = toolset.system_health(settle=settle)
    except Exception as exc:
        return {"healthy": False, "detail": f"check failed: {type(exc).__name__}: {exc}", "failing": []}
    if result is None:
        return None
    return {"healthy": result.healthy, "detail": result.detail, "failing": list(result.failing)}
