"""The sweeper's side of the diagnostics jobs (``core/jobs.py``): diagnoses and action executions
whose worker died.

- A trajectory left running without a heartbeat is requeued (``SKILLGATE_JOBS_MAX_ATTEMPTS`` claims
  at most), then failed with the reason; a queued one whose message was lost is sent again.
- An approved action whose message was lost is sent again (it is still claimed exactly once).
- An action left EXECUTING without a heartbeat may or may not have run: it is never run again.
  The recovery re-checks its target's health: healthy, the outcome is recorded (EXECUTED, marked
  interrupted); not healthy, or not checkable, the action is FAILED (interrupted) and a new
  ActionRequest of the same plan asks for a new approval (``retry_of``), under the same two-person
  rule as any proposal.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core import jobs, jobs_conf
from diagnostics import doorbell
from diagnostics.models import ActionRequest, Step
from diagnostics.services.actions import action_request_propose
from diagnostics.services.execution import record_outcome
from diagnostics.services.trajectories import TRAJECTORY_JOB, step_record, trajectory_give_up

log = logging.getLogger(__name__)

ACTION_JOB = jobs.JobSpec(
    ActionRequest,
    queued=ActionRequest.Status.APPROVED,
    running=ActionRequest.Status.EXECUTING,
    born="decided_at",
)


def diagnostics_jobs_sweep() -> dict[str, jobs.SweepReport]:
    """One sweep of the diagnoses and the action executions (the beat task calls it)."""
    tasks = doorbell.tasks()
    return {
        "trajectories": jobs.sweep(
            TRAJECTORY_JOB,
            enqueue=tasks.enqueue_diagnosis,
            give_up=trajectory_give_up,
            **jobs_conf.get().sweep_timings(),
        ),
        "actions": jobs.sweep(
            ACTION_JOB,
            enqueue=tasks.enqueue_execution,
            give_up=_action_give_up,
            retry=tasks.enqueue_recovery,
            **jobs_conf.get().sweep_timings(),
        ),
    }


def action_request_recovery_get(*, action_request_id: int, attempt: int) -> ActionRequest | None:
    """The interrupted action this recovery attempt owns (the sweeper took it over), or None."""
    return (
        jobs.still_ours(ACTION_JOB, action_request_id, attempt)
        .select_related("trajectory__incident", "decided_by")
        .first()
    )


def action_request_recovered(*, action: ActionRequest, attempt: int, health: dict[str, Any]) -> ActionRequest:
    """Ends an interrupted execution on what its target's re-check says (see the module's docstring)."""
    note = (
        f"The run of {action.tool} was interrupted (its worker was lost); whether it ran is unknown. "
        f"Re-checked the target: healthy={health.get('healthy')}: {str(health.get('detail', ''))[:500]}"
    )
    with transaction.atomic():
        rows = jobs.still_ours(ACTION_JOB, action.pk, attempt)
        if not health.get("healthy"):
            _interrupted(rows, action, note)
        elif rows.update(
            status=ActionRequest.Status.EXECUTED,
            result={"ok": True, "interrupted": True, "output": note},
            health_after=health,
        ):
            action.refresh_from_db()
            record_outcome(
                action=action,
                ok=True,
                output=note,
                health=health,
                summary=f"{action.tool}: interrupted run, target healthy on re-check (approved by "
                f"{action.decided_by})",
                rechecked=True,
            )
    action.refresh_from_db()
    return action


def _action_give_up(rows: QuerySet[ActionRequest], action_request_id: int, reason: str) -> bool:
    """The recoveries themselves kept dying: nothing more is known, so a new approval is asked for."""
    action = ActionRequest.objects.select_related("trajectory__incident").get(pk=action_request_id)
    return _interrupted(rows, action, f"The run of {action.tool} was interrupted; {reason}.")


def _interrupted(rows: QuerySet[ActionRequest], action: ActionRequest, note: str) -> bool:
    """FAILED (interrupted), and the same plan proposed again for a new approval."""
    if not rows.update(
        status=ActionRequest.Status.FAILED,
        result={"ok": False, "interrupted": True, "output": note},
        heartbeat_at=timezone.now(),
    ):
        return False
    step_record(
        trajectory=action.trajectory,
        phase=Step.Phase.EXECUTE,
        tool=action.tool,
        arguments=action.args,
        result=note[:8000],
        ok=False,
        summary=f"{action.tool}: run interrupted, outcome unknown; asking for a new approval",
    )
    again = action_request_propose(
        trajectory=action.trajectory,
        tool=action.tool,
        args=action.args,
        reason=f"Re-approval: the approved run of action {action.pk} was interrupted and its target "
        f"is not healthy. {action.reason}",
    )
    ActionRequest.objects.filter(pk=again.pk).update(retry_of=action)
    ActionRequest.objects.filter(pk=action.pk).update(
        result={"ok": False, "interrupted": True, "output": note, "reapproval": again.pk}
    )
    step_record(
        trajectory=action.trajectory,
        phase=Step.Phase.PROPOSE,
        tool=action.tool,
        arguments=action.args,
        summary=f"Proposed {action.tool} again (action request {again.pk}) for a new approval.",
    )
    log.warning("action %s interrupted; re-approval asked as action %s", action.pk, again.pk)
    return True
