"""Trajectories (one diagnosis run of an incident) and their steps: claimed by a worker, recorded
step by step as they happen, finished, failed or graded."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max, QuerySet
from django.utils import timezone

from core import jobs
from diagnostics.models import Incident, Step, Trajectory

TRAJECTORY_JOB = jobs.JobSpec(
    Trajectory, queued=Trajectory.Status.QUEUED, running=Trajectory.Status.RUNNING, error="error"
)


def trajectory_claim(*, trajectory_id: int) -> Trajectory | None:
    """Claims a queued trajectory with a conditional UPDATE (``core/jobs.py``): its ``attempts`` then
    names this run. None when another delivery has it or it is finished: running the task twice is
    harmless. A trajectory left running by a dead worker is requeued by the sweeper, not here.
    A rerun after a lost worker starts with a note saying so (the earlier attempt's steps stay)."""
    attempt = jobs.claim(TRAJECTORY_JOB, trajectory_id, started_at=timezone.now())
    if attempt is None:
        return None
    trajectory = Trajectory.objects.select_related("incident", "incident__created_by").get(pk=trajectory_id)
    if attempt > 1:
        step_record(
            trajectory=trajectory,
            phase=Step.Phase.NOTE,
            ok=False,
            summary=f"Attempt {attempt}: the previous one was interrupted "
            f"({trajectory.error or 'worker lost'}).",
        )
    return trajectory


def _ours(trajectory: Trajectory) -> QuerySet[Trajectory]:
    """The trajectory while the attempt that claimed it still owns it."""
    return jobs.still_ours(TRAJECTORY_JOB, trajectory.pk, trajectory.attempts)


def trajectory_give_up(rows: QuerySet[Trajectory], trajectory_id: int, reason: str) -> bool:
    """The sweeper's end of a trajectory whose workers kept dying: failed with the reason."""
    if not rows.update(status=Trajectory.Status.FAILED, error=reason[:5000], finished_at=timezone.now()):
        return False
    trajectory = Trajectory.objects.get(pk=trajectory_id)
    Incident.objects.filter(pk=trajectory.incident_id, status=Incident.Status.INVESTIGATING).update(
        status=Incident.Status.FAILED
    )
    step_record(trajectory=trajectory, phase=Step.Phase.ERROR, summary=reason[:2000], ok=False)
    return True


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
    if not _ours(trajectory).update(
        status=Trajectory.Status.SUCCEEDED,
        mode=mode,
        diagnosis=diagnosis,
        root_cause=root_cause[:5000],
        findings=findings,
        tool_calls=tool_calls,
        no_data_calls=no_data_calls,
        finished_at=timezone.now(),
    ):
        trajectory.refresh_from_db()
        return trajectory  # the sweeper gave this attempt up or requeued it; its decision stands
    Incident.objects.filter(pk=trajectory.incident_id, status=Incident.Status.INVESTIGATING).update(
        status=Incident.Status.DIAGNOSED
    )
    trajectory.refresh_from_db()
    return trajectory


@transaction.atomic
def trajectory_fail(*, trajectory: Trajectory, error: str) -> Trajectory:
    if not _ours(trajectory).update(
        status=Trajectory.Status.FAILED, error=error[:5000], finished_at=timezone.now()
    ):
        trajectory.refresh_from_db()
        return trajectory  # the sweeper gave this attempt up or requeued it; its decision stands
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
