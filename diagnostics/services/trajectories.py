"""Trajectories (one diagnosis run of an incident) and their steps: claimed by a worker, recorded
step by step as they happen, finished, failed or graded."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from diagnostics.models import Incident, Step, Trajectory


def trajectory_claim(*, trajectory_id: int, stale_after_s: int = 1800) -> Trajectory | None:
    """Claims a queued trajectory (or one whose worker died long ago) with a conditional UPDATE.

    Returns None when another worker has it or it is finished: running the task twice is harmless.
    """
    now = timezone.now()
    queued = Trajectory.objects.filter(pk=trajectory_id, status=Trajectory.Status.QUEUED)
    claimed = queued.update(status=Trajectory.Status.RUNNING, started_at=now)
    if not claimed:
        stale = Trajectory.objects.filter(
            pk=trajectory_id,
            status=Trajectory.Status.RUNNING,
            started_at__lt=now - timedelta(seconds=stale_after_s),
        )
        claimed = stale.update(started_at=now)
    if not claimed:
        return None
    return Trajectory.objects.select_related("incident", "incident__created_by").get(pk=trajectory_id)


def step_record(*, trajectory: Trajectory, phase: str, **fields: Any) -> Step:
    """Commits one step at once, so a page or a Slack thread can follow the diagnosis live.

    The next index is taken under the unique (trajectory, index) constraint; a concurrent writer
    (e.g. the executor recording while a rerun records) makes it retry with the next index.
    """
    for attempt in range(3):
        try:
            with transaction.atomic():
                last = Step.objects.filter(trajectory=trajectory).aggregate(m=Max("index"))["m"]
                return Step.objects.create(
                    trajectory=trajectory, index=(last or 0) + 1, phase=phase, **fields
                )
        except IntegrityError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@transaction.atomic
def trajectory_finish(
    *,
    trajectory: Trajectory,
    mode: str,
    diagnosis: str,
    root_cause: str,
    findings: list[dict[str, Any]],
    tool_calls: int,
    no_data_calls: int,
) -> Trajectory:
    Trajectory.objects.filter(pk=trajectory.pk).update(
        status=Trajectory.Status.SUCCEEDED,
        mode=mode,
        diagnosis=diagnosis,
        root_cause=root_cause[:5000],
        findings=findings,
        tool_calls=tool_calls,
        no_data_calls=no_data_calls,
        finished_at=timezone.now(),
    )
    Incident.objects.filter(pk=trajectory.incident_id, status=Incident.Status.INVESTIGATING).update(
        status=Incident.Status.DIAGNOSED
    )
    trajectory.refresh_from_db()
    return trajectory


@transaction.atomic
def trajectory_fail(*, trajectory: Trajectory, error: str) -> Trajectory:
    Trajectory.objects.filter(pk=trajectory.pk).update(
        status=Trajectory.Status.FAILED, error=error[:5000], finished_at=timezone.now()
    )
    Incident.objects.filter(pk=trajectory.incident_id, status=Incident.Status.INVESTIGATING).update(
        status=Incident.Status.FAILED
    )
    step_record(trajectory=trajectory, phase=Step.Phase.ERROR, summary=error[:2000], ok=False)
    trajectory.refresh_from_db()
    return trajectory


def trajectory_grade(*, trajectory: Trajectory, success: bool, grading: dict[str, Any]) -> Trajectory:
    Trajectory.objects.filter(pk=trajectory.pk).update(graded=True, success=success, grading=grading)
    trajectory.refresh_from_db()
    return trajectory
