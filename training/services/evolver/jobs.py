"""The Evolver's jobs on ``core/jobs.py``: a diagnostic skill (pending -> running: the teacher writes
its corrective plan) and a skill set's admission (candidate -> replaying: held-out replay).

Each row carries its state, the number of claims and a heartbeat. The beat sweeper
(``evolver_jobs_sweep``) sends again the message of a job queued too long ago (lost by the
broker, or never sent while it was down), requeues a job whose worker stopped beating, and after
``SKILLGATE_JOBS_MAX_ATTEMPTS`` claims ends it failed with the reason.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from core import jobs, jobs_conf
from training import doorbell
from training.models import DiagnosticSkill, DiagnosticSkillSet

SKILL_JOB = jobs.JobSpec(
    DiagnosticSkill,
    queued=DiagnosticSkill.Status.PENDING,
    running=DiagnosticSkill.Status.RUNNING,
    error="error",
)
SKILL_SET_JOB = jobs.JobSpec(
    DiagnosticSkillSet,
    queued=DiagnosticSkillSet.Status.CANDIDATE,
    running=DiagnosticSkillSet.Status.REPLAYING,
    error="error",
)


def heartbeat_s() -> float:
    return jobs_conf.get().heartbeat_s


def max_attempts() -> int:
    return jobs_conf.get().max_attempts


def _skill_give_up(rows: QuerySet[DiagnosticSkill], skill_id: int, reason: str) -> bool:
    return bool(
        rows.update(status=DiagnosticSkill.Status.FAILED, error=reason[:2000], finished_at=timezone.now())
    )


def _skill_set_give_up(rows: QuerySet[DiagnosticSkillSet], skill_set_id: int, reason: str) -> bool:
    return bool(
        rows.update(status=DiagnosticSkillSet.Status.FAILED, error=reason[:2000], decided_at=timezone.now())
    )


def evolver_jobs_sweep() -> dict[str, jobs.SweepReport]:
    """One sweep of the skills and the skill-set admissions (the beat task calls it)."""
    evolver = doorbell.tasks().evolver
    return {
        "skills": jobs.sweep(
            SKILL_JOB,
            enqueue=evolver.enqueue_evolve,
            give_up=_skill_give_up,
            **jobs_conf.get().sweep_timings(),
        ),
        "skill_sets": jobs.sweep(
            SKILL_SET_JOB,
            enqueue=evolver.enqueue_admission,
            give_up=_skill_set_give_up,
            **jobs_conf.get().sweep_timings(),
        ),
    }
