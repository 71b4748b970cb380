"""Celery tasks of the learning cycle, thin like views: take ids, claim with a conditional UPDATE
(in the service), idempotent, acks_late, retried only on transient errors.

Stages run on the queue named by ``training.conf.get().cycle.queue`` (default: Celery's default queue);
training itself runs on the trainer's ``gpu`` queue.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from core.queues import enqueue
from training import conf
from training.services.cycle import demonstrations_replay, orchestrate
from training.services.rollback import rollbacks_check


def enqueue_stage(cycle_id: int, stage: str) -> None:
    enqueue(cycle_stage, cycle_id, stage, queue=conf.get().cycle.queue)


@shared_task(
    acks_late=True,
    ignore_result=True,
    autoretry_for=orchestrate.TRANSIENT,
    retry_backoff=True,
    max_retries=5,
)
def cycle_stage(cycle_id: int, stage: str) -> str:
    return orchestrate.cycle_stage_run(cycle_id=cycle_id, stage=stage)


@shared_task(acks_late=True, ignore_result=True)
def cycles_poll() -> int:
    return orchestrate.cycles_poll()


@shared_task(acks_late=True, ignore_result=True)
def cycles_autostart() -> list[int]:
    return orchestrate.cycles_autostart()


@shared_task(acks_late=True, ignore_result=True)
def cycles_scheduled() -> list[int]:
    return orchestrate.cycles_start_scheduled()


@shared_task(acks_late=True, ignore_result=True, autoretry_for=orchestrate.TRANSIENT, max_retries=3)
def replay_profile(profile_id: int, invocation_ids: list[str] | None = None) -> dict[str, Any]:
    """Replay on its own (outside a cycle): failed student calls of a profile become demonstrations."""
    return demonstrations_replay(profile_id=profile_id, invocation_ids=invocation_ids).as_json()


@shared_task(acks_late=True, ignore_result=True)
def cycles_check_live() -> list[int]:
    """Beat: admitted configurations whose sampled live correctness fell below their admission's figure
    are rolled back, adapter and SkillBook together (training/services/rollback.py)."""
    return rollbacks_check()
