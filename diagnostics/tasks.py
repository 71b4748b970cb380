"""Celery tasks, thin like views: take ids, claim with a conditional UPDATE, idempotent, acks_late.

Enqueued on commit by the services (``enqueue_*`` below), on the queue named by DIAGNOSTICS_QUEUE
(default: Celery's default queue).
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import OperationalError

from diagnostics import services
from diagnostics.agent import config
from diagnostics.agent.executor import Executor
from diagnostics.models import ActionRequest
from diagnostics.recording import DatabaseActionLedger, run_trajectory
from diagnostics.toolsets.registry import UnknownEnvironment, build_environment

log = logging.getLogger(__name__)


def _options() -> dict[str, str]:
    """DIAGNOSTICS_QUEUE routes the tasks to their own queue; unset, they use Celery's default queue."""
    queue = config.task_queue()
    return {"queue": str(queue)} if queue else {}


def enqueue_diagnosis(trajectory_id: int) -> None:
    run_diagnosis.apply_async((trajectory_id,), **_options())


def enqueue_execution(action_request_id: int) -> None:
    execute_action.apply_async((action_request_id,), **_options())


@shared_task(
    acks_late=True, ignore_result=True, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3
)
def run_diagnosis(trajectory_id: int) -> str:
    trajectory = services.trajectory_claim(trajectory_id=trajectory_id)
    if trajectory is None:
        return "not claimed"
    try:
        run_trajectory(trajectory)
    except UnknownEnvironment as exc:
        services.trajectory_fail(trajectory=trajectory, error=str(exc))
        return "failed"
    except Exception as exc:
        log.exception("diagnosis of trajectory %s failed", trajectory_id)
        services.trajectory_fail(trajectory=trajectory, error=f"{type(exc).__name__}: {exc}")
        return "failed"
    return "done"


@shared_task(
    acks_late=True, ignore_result=True, autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3
)
def execute_action(action_request_id: int) -> str:
    action = ActionRequest.objects.select_related("trajectory__incident").filter(pk=action_request_id).first()
    if action is None or action.status != ActionRequest.Status.APPROVED:
        return "not runnable"
    incident = action.trajectory.incident
    try:
        environment = build_environment(incident.environment, incident.environment_options)
    except UnknownEnvironment as exc:
        claimed = services.action_request_claim_execution(action_request_id=action_request_id)
        if claimed is not None:
            services.action_request_refuse(action=claimed, reason=str(exc))
        return "failed"
    result = Executor(environment.write_toolsets(), ledger=DatabaseActionLedger()).execute(
        action_request_id=action_request_id,
        environment=incident.environment,
        environment_options=incident.environment_options or {},
    )
    return "not claimed" if result is None else result.status


@shared_task(acks_late=True, ignore_result=True)
def expire_actions() -> int:
    return services.action_requests_expire()
