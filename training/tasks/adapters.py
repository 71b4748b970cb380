"""Celery tasks for adapters: training on the `gpu` queue, recovery and unloading on beat.

``adapter_train`` is routed to ``training.conf.get().training.queue`` (``CELERY_TASK_ROUTES``). Run
its worker with ``--prefetch-multiplier 1 --max-tasks-per-child 1`` (one long job at a time, a fresh
process per run so the model's memory is given back). Soft and hard time limits come from settings.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from training import conf
from training.models import TrainingRun
from training.services import adapters as services
from training.services.cycle.cancel import TrainingCancelled, stopped_when_cancelled

_LIMITS = conf.get().training  # read when the worker imports its tasks (a Celery task option)


@shared_task(
    bind=True,
    acks_late=True,
    ignore_result=True,
    soft_time_limit=_LIMITS.soft_time_limit_s,
    time_limit=_LIMITS.time_limit_s,
)
def adapter_train(self: Any, run_id: int) -> str:
    """Trains one queued run; a second delivery of the same run does nothing. A run cancelled while it
    trains is stopped here: the watch's SIGTERM ends the training (training/services/cycle/cancel.py)."""
    try:
        with stopped_when_cancelled(run_id, every_s=conf.get().training.heartbeat_s):
            run = services.training_run_execute(run_id=run_id, task_id=self.request.id or "")
    except TrainingCancelled:
        return str(TrainingRun.Status.CANCELLED)
    return str(run.status)


def enqueue_training(run_id: int) -> None:
    """Sends the run's training now, on the gpu queue (``CELERY_TASK_ROUTES``)."""
    adapter_train.delay(run_id)


@shared_task(acks_late=True, ignore_result=True)
def training_runs_recover() -> list[int]:
    """Beat: runs whose worker stopped sending heartbeats requeued (bounded attempts) or failed, and
    lost messages of queued runs sent again (core/jobs.py)."""
    return services.training_runs_recover()


@shared_task(acks_late=True, ignore_result=True)
def adapters_unload_retired() -> list[str]:
    """Unloads from vLLM the adapters retired longer ago than the grace period."""
    return services.adapters_unload_retired()
