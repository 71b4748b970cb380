"""Execution of approved actions: claimed exactly once (a conditional UPDATE), refused when the plan,
the environment or the decider's standing changed, and the result recorded as steps.

The claim (APPROVED -> EXECUTING, committed before anything runs) is the record that the action
started: an EXECUTING action whose worker died is never claimed again; the sweeper hands it to the
recovery (``diagnostics/services/recovery.py``), which re-checks the target instead of re-running it.
The result of a run is written with its own retries: a database error after the action ran must not
re-run the action (the task itself is never retried)."""

from __future__ import annotations

import time
from typing import Any

from django.db import OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from diagnostics import approvals
from diagnostics.models import ActionRequest, Incident, Step
from diagnostics.services.trajectories import step_record
from diagnostics.services.verification import action_request_schedule_verification


def action_request_claim_execution(
    *,
    action_request_id: int,
    environment: str | None = None,
    environment_options: dict[str, Any] | None = None,
) -> ActionRequest | None:
    """Approved, decided by someone not involved, not expired, plan unchanged -> EXECUTING.

    The plan is re-hashed with the incident's environment as it is now and, when the caller says
    which environment it built (``environment``, ``environment_options``), with that one too: both
    must match the approved hash. An approved action whose plan or environment changed, or whose
    decider turns out to be involved in the incident, is refused (FAILED, with the reason) and None
    returned. A conditional UPDATE: a second caller (a double approval, a redelivered task) gets None.
    """
    action = ActionRequest.objects.select_related("decided_by").filter(pk=action_request_id).first()
    if action is None or action.decided_by is None or action.status != ActionRequest.Status.APPROVED:
        return None
    if action.expires_at <= timezone.now():
        return None  # expired: ``action_requests_expire`` marks it
    incident = Incident.objects.get(trajectories=action.trajectory_id)
    reason = ""
    if approvals.action_plan_hash(action, incident) != action.plan_hash:
        reason = "the plan or the incident's environment changed after approval"
    elif environment is not None and (environment, environment_options or {}) != (
        incident.environment,
        incident.environment_options or {},
    ):
        reason = "the environment built for the run is not the one approved"
    elif found := approvals.involvement(action=action, incident=incident, user=action.decided_by):
        reason = f"it was approved by {action.decided_by} who is involved in the incident ({found.code})"
    if reason:
        _refuse_approved(action, reason)
        return None
    claimed = ActionRequest.objects.filter(
        pk=action.pk,
        status=ActionRequest.Status.APPROVED,
        expires_at__gt=timezone.now(),
        plan_hash=action.plan_hash,
        tool=action.tool,
        decided_by_id=action.decided_by_id,
    ).update(
        status=ActionRequest.Status.EXECUTING,
        executed_at=timezone.now(),
        attempts=F("attempts") + 1,
        heartbeat_at=timezone.now(),
    )
    if not claimed:
        return None
    action.refresh_from_db()
    return action


def action_request_plan_intact(*, action: ActionRequest) -> bool:
    """Whether the claimed action's plan, read again now, still hashes to the approved hash."""
    current = ActionRequest.objects.filter(pk=action.pk).values("tool", "args").first()
    if current is None or (current["tool"], current["args"]) != (action.tool, action.args):
        return False
    incident = Incident.objects.get(trajectories=action.trajectory_id)
    return approvals.action_plan_hash(action, incident) == action.plan_hash


def _refuse_approved(action: ActionRequest, reason: str) -> None:
    """An approved action that must not run: FAILED with the reason, once (a conditional UPDATE)."""
    refused = ActionRequest.objects.filter(pk=action.pk, status=ActionRequest.Status.APPROVED).update(
        status=ActionRequest.Status.FAILED, result={"ok": False, "refused": reason}
    )
    if refused:
        _record_refusal(action, reason)


FINISH_TRIES = 4


def action_request_finish(
    *, action: ActionRequest, ok: bool, output: str, health: dict[str, Any] | None = None
) -> ActionRequest:
    """Records the result of the action's one run. A database error is retried here (the action ran:
    only the write is repeated); when the database stays away the row stays EXECUTING and the
    sweeper's recovery re-checks the target."""
    for attempt in range(FINISH_TRIES):
        try:
            return _finish_once(action=action, ok=ok, output=output, health=health)
        except OperationalError:
            if connection.in_atomic_block or attempt == FINISH_TRIES - 1:
                raise
            connection.close()  # a broken connection is not reused by the next try
            time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


@transaction.atomic
def _finish_once(
    *, action: ActionRequest, ok: bool, output: str, health: dict[str, Any] | None
) -> ActionRequest:
    ActionRequest.objects.filter(pk=action.pk, status=ActionRequest.Status.EXECUTING).update(
        status=ActionRequest.Status.EXECUTED if ok else ActionRequest.Status.FAILED,
        result={"ok": ok, "output": output[:20000]},
        health_after=health or {},
    )
    action.refresh_from_db()
    record_outcome(action=action, ok=ok, output=output, health=health)
    return action


def record_outcome(
    *,
    action: ActionRequest,
    ok: bool,
    output: str,
    health: dict[str, Any] | None,
    summary: str = "",
    rechecked: bool = False,
) -> None:
    """The EXECUTE step (and the HEALTH step after it) of an action's outcome. A run that succeeded is
    checked again later (``verification``): only that check resolves the incident. ``rechecked``: the
    health is itself a later re-check (the recovery of an interrupted run), which resolves it when healthy."""
    trajectory = action.trajectory
    step_record(
        trajectory=trajectory,
        phase=Step.Phase.EXECUTE,
        tool=action.tool,
        arguments=action.args,
        result=output[:8000],
        ok=ok,
        summary=summary or f"{action.tool} {'ran' if ok else 'failed'} (approved by {action.decided_by})",
    )
    if health:
        step_record(
            trajectory=trajectory,
            phase=Step.Phase.HEALTH,
            tool=action.tool,
            ok=bool(health.get("healthy")),
            summary=f"healthy={health.get('healthy')}: {str(health.get('detail', ''))[:500]}",
        )
    if rechecked and ok and health and health.get("healthy"):
        Incident.objects.filter(pk=trajectory.incident_id).update(status=Incident.Status.RESOLVED)
    elif ok and action.status == ActionRequest.Status.EXECUTED:
        action_request_schedule_verification(action=action)


@transaction.atomic
def action_request_refuse(*, action: ActionRequest, reason: str) -> ActionRequest:
    """The executor found the claimed action unfit to run (plan changed, not allowed, bad args)."""
    ActionRequest.objects.filter(pk=action.pk, status=ActionRequest.Status.EXECUTING).update(
        status=ActionRequest.Status.FAILED, result={"ok": False, "refused": reason}
    )
    action.refresh_from_db()
    _record_refusal(action, reason)
    return action


def _record_refusal(action: ActionRequest, reason: str) -> None:
    step_record(
        trajectory=action.trajectory,
        phase=Step.Phase.EXECUTE,
        tool=action.tool,
        arguments=action.args,
        ok=False,
        summary=f"Refused to run: {reason}",
    )
