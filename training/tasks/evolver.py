"""Celery tasks of the AOI Evolver, thin like views: take ids, claim in the service, idempotent,
acks_late. The rows are the record and the broker only the doorbell (``core/jobs.py``): a running
job writes a heartbeat, and the beat sweeper (``sweep_jobs``) sends lost messages again and requeues
jobs whose worker died; only an unreachable gateway is retried by the task itself."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from core.queues import enqueue
from diagnostics.agent.investigation.llm import LLMUnavailable
from routing.models import TaskProfile
from training import conf
from training.services import evolver
from training.services.evolver.jobs import evolver_jobs_sweep

log = logging.getLogger(__name__)


def _send(task: Any, pk: int) -> None:
    """Sends now; a broker that is down is logged, not raised: the sweeper sends it again."""
    try:
        enqueue(task, pk, queue=conf.get().evolver.queue)
    except Exception:
        log.warning("could not send %s(%s); the sweeper sends it again", task.name, pk, exc_info=True)


def enqueue_evolve(skill_id: int) -> None:
    _send(evolve_trajectory, skill_id)


def enqueue_admission(skill_set_id: int) -> None:
    _send(admit_skill_set, skill_set_id)


@shared_task(
    acks_late=True, ignore_result=True, autoretry_for=(LLMUnavailable,), retry_backoff=True, max_retries=3
)
def evolve_trajectory(skill_id: int) -> str:
    """The teacher turns one failed trajectory's job into a corrective plan (or rejects the answer)."""
    return evolver.diagnostic_skill_run(skill_id=skill_id)


@shared_task(acks_late=True, ignore_result=True)
def evolver_sweep() -> dict[str, Any]:
    """Periodic: jobs for new graded failures, demonstrations from new successful trajectories, and
    a candidate skill set sent to admission when ready skills changed."""
    created = evolver.evolver_sweep()
    exported = evolver.successful_trajectories_export()
    admitted = []
    for profile_id in (
        TaskProfile.objects.filter(diagnostic_skills__status="ready").values_list("pk", flat=True).distinct()
    ):
        skill_set = evolver.skill_set_propose(profile_id=profile_id)
        if skill_set is not None:
            enqueue_admission(skill_set.pk)
            admitted.append(skill_set.pk)
    return {"jobs": created, "demonstrations": exported, "skill_sets": admitted}


@shared_task(acks_late=True, ignore_result=True, autoretry_for=(LLMUnavailable,), max_retries=2)
def admit_skill_set(skill_set_id: int) -> str:
    return str(evolver.skill_set_admit(skill_set_id=skill_set_id).status)


@shared_task(acks_late=True, ignore_result=True)
def sweep_jobs() -> dict[str, dict[str, list[int]]]:
    """Beat: Evolver jobs whose message was lost or whose worker died (core/jobs.py)."""
    return {
        family: {"rung": report.rung, "requeued": report.requeued, "given_up": report.given_up}
        for family, report in evolver_jobs_sweep().items()
    }
