"""Closing the loop after a fix: the symptom observed again a while after an executed action, the
incident resolved only when that check passes, diagnosed again when it does not, and the fix proposed
for rollback when it made things worse.

An executed action is scheduled for its check (``verify_status`` pending, ``verify_at`` due) and its
incident is *verifying*; the ``verify_fix`` task (which takes the action's id) claims the check with a
conditional UPDATE (pending -> checking), observes through the Executor (nothing runs) and records
here: cleared -> the incident is resolved; not cleared -> a new diagnosis is queued, whose evidence
starts at this fix (``recording.evidence_window_for``); worse (a part that was healthy before the fix
fails after it) -> the same, and the action that undoes the fix is proposed (it waits for approval
like any other). Unknown is not pass: a check that could not observe counts as not cleared.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from core import jobs_conf
from diagnostics import conf, doorbell
from diagnostics.models import ActionRequest, Incident, Step, Trajectory
from diagnostics.services.actions import action_request_propose
from diagnostics.services.incidents import incident_rediagnose
from diagnostics.services.trajectories import step_record


def action_request_schedule_verification(*, action: ActionRequest) -> None:
    """An executed fix: its check is due after DIAGNOSTICS_VERIFY_AFTER_S; the incident is verifying
    (not resolved: only the check resolves it). Rung on commit."""
    delay = conf.get().agent.verify_after_s
    ActionRequest.objects.filter(pk=action.pk, verify_status=ActionRequest.Verify.NONE).update(
        verify_status=ActionRequest.Verify.PENDING, verify_at=timezone.now() + timedelta(seconds=delay)
    )
    Incident.objects.filter(trajectories=action.trajectory_id).exclude(
        status=Incident.Status.RESOLVED
    ).update(status=Incident.Status.VERIFYING, updated_at=timezone.now())
    enqueue = doorbell.tasks().enqueue_verification
    transaction.on_commit(lambda: enqueue(action.pk, delay))


def action_request_claim_verification(*, action_request_id: int) -> ActionRequest | None:
    """pending -> checking, once (a redelivered message gets None)."""
    claimed = ActionRequest.objects.filter(
        pk=action_request_id,
        status=ActionRequest.Status.EXECUTED,
        verify_status=ActionRequest.Verify.PENDING,
    ).update(verify_status=ActionRequest.Verify.CHECKING, verify_at=timezone.now())
    if not claimed:
        return None
    return ActionRequest.objects.select_related("trajectory__incident").get(pk=action_request_id)


def _worse(before: dict[str, Any] | None, system: dict[str, Any] | None) -> list[str]:
    """Parts failing after the fix that were not failing before it."""
    if not before or not system:
        return []
    return sorted(set(system.get("failing") or []) - set(before.get("failing") or []))


def verdict_of(observed: dict[str, Any], before: dict[str, Any] | None) -> tuple[str, str]:
    """(verify status, a sentence) of what the check saw."""
    system = observed.get("system")
    target_ok = bool(observed.get("healthy"))
    system_ok = system is None or bool(system.get("healthy"))
    worse = _worse(before, system)
    if worse:
        return ActionRequest.Verify.WORSE, (
            f"Worse after the fix: {', '.join(worse)} failing now, healthy before it "
            f"({(system or {}).get('detail', '')[:300]})."
        )
    if target_ok and system_ok:
        detail = (system or {}).get("detail") or observed.get("detail", "")
        return ActionRequest.Verify.CLEARED, f"The symptom cleared: {str(detail)[:300]}."
    where = observed.get("detail", "") if not target_ok else (system or {}).get("detail", "")
    return ActionRequest.Verify.NOT_CLEARED, f"The symptom stayed after the fix: {str(where)[:400]}."


@transaction.atomic
def action_request_verified(*, action: ActionRequest, observed: dict[str, Any]) -> ActionRequest:
    """Records the check of an executed fix and acts on it (resolve; or diagnose again, and propose
    undoing the fix when it made things worse)."""
    before = (action.health_after or {}).get("before")
    status, sentence = verdict_of(observed, before)
    updated = ActionRequest.objects.filter(pk=action.pk, verify_status=ActionRequest.Verify.CHECKING).update(
        verify_status=status, verify_at=timezone.now(), verification={**observed, "verdict": sentence}
    )
    action.refresh_from_db()
    if not updated:
        return action
    trajectory = action.trajectory
    cleared = status == ActionRequest.Verify.CLEARED
    step_record(
        trajectory=trajectory,
        phase=Step.Phase.HEALTH,
        tool=action.tool,
        arguments={"verification": status},
        ok=cleared,
        summary=f"Checked {conf.get().agent.verify_after_s:.0f}s after {action.tool}: {sentence}",
    )
    incident = Incident.objects.get(pk=trajectory.incident_id)
    if cleared:
        Incident.objects.filter(pk=incident.pk).update(
            status=Incident.Status.RESOLVED, updated_at=timezone.now()
        )
        return action
    inverse = observed.get("inverse")
    if status == ActionRequest.Verify.WORSE and isinstance(inverse, dict) and inverse.get("tool"):
        _propose_rollback(action, trajectory, inverse, sentence)
    incident_rediagnose(incident=incident, reason=f"the fix {action.tool} (action {action.pk}) did not heal")
    return action


def _propose_rollback(
    action: ActionRequest, trajectory: Trajectory, inverse: dict[str, Any], sentence: str
) -> ActionRequest:
    args = dict(inverse.get("args") or {})
    rollback = action_request_propose(
        trajectory=trajectory,
        tool=str(inverse["tool"]),
        args=args,
        reason=f"Roll back action {action.pk} ({action.tool} {json.dumps(action.args, sort_keys=True)}): "
        f"{sentence}",
    )
    step_record(
        trajectory=trajectory,
        phase=Step.Phase.PROPOSE,
        tool=rollback.tool,
        arguments=args,
        summary=f"Proposed rolling back action {action.pk} (action request {rollback.pk}), waiting for "
        f"approval: {sentence}",
    )
    return rollback


def action_requests_verification_sweep() -> list[int]:
    """The rows are the record: a check whose message was lost (pending, overdue by the jobs' ring
    interval) is sent again, and one whose worker died (checking past the stale interval) is pending
    again and sent. Returns the action ids sent."""
    timings = jobs_conf.get().sweep_timings()
    now = timezone.now()
    lost = ActionRequest.objects.filter(
        verify_status=ActionRequest.Verify.PENDING,
        verify_at__lt=now - timedelta(seconds=timings["ring_after_s"]),
    )
    stale = ActionRequest.objects.filter(
        verify_status=ActionRequest.Verify.CHECKING,
        verify_at__lt=now - timedelta(seconds=timings["stale_after_s"]),
    )
    sent: list[int] = []
    for pk in list(lost.values_list("pk", flat=True)) + list(stale.values_list("pk", flat=True)):
        again = ActionRequest.objects.filter(
            pk=pk, verify_status__in=[ActionRequest.Verify.PENDING, ActionRequest.Verify.CHECKING]
        ).update(verify_status=ActionRequest.Verify.PENDING, verify_at=now)
        if again:
            doorbell.tasks().enqueue_verification(pk, 0.0)
            sent.append(pk)
    return sent
