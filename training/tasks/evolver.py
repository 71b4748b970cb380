"""Celery tasks of the AOI Evolver, thin like views: take ids, claim in the service, idempotent,
acks_late; only an unreachable gateway is retried."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from core.queues import enqueue
from diagnostics.agent.llm import LLMUnavailable
from routing.models import TaskProfile
from training.services import evolver


def enqueue_evolve(skill_id: int) -> None:
    enqueue(evolve_trajectory, skill_id, queue=evolver.evolver_setting("QUEUE"))


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
            enqueue(admit_skill_set, skill_set.pk, queue=evolver.evolver_setting("QUEUE"))
            admitted.append(skill_set.pk)
    return {"jobs": created, "demonstrations": exported, "skill_sets": admitted}


@shared_task(acks_late=True, ignore_result=True, autoretry_for=(LLMUnavailable,), max_retries=2)
def admit_skill_set(skill_set_id: int) -> str:
    return str(evolver.skill_set_admit(skill_set_id=skill_set_id).status)
