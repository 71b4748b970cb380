"""Celery tasks, thin like views: take ids, claim with a conditional UPDATE, idempotent, acks_late.

Enqueued on commit by the services, which call this module's ``enqueue_*`` through
``diagnostics/doorbell.py`` (installed by ``DiagnosticsConfig.ready()``), on the queue named by
DIAGNOSTICS_QUEUE (default: Celery's default queue). The rows are the record and the broker only the doorbell
(``core/jobs.py``): a running job writes a heartbeat, and the beat sweeper (``sweep_jobs``) sends
lost messages again, requeues diagnoses whose worker died and hands interrupted actions to
``recover_action``. No task here retries itself: a retry of ``execute_action`` after its action ran
would run it twice, and a redelivered diagnosis finds its row claimed.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from celery import shared_task
from django.db import OperationalError

from core import jobs, jobs_conf
from core.queues import enqueue, queue_options
from diagnostics import conf, services
from diagnostics.agent.execution.executor import ClaimedAction, Executor
from diagnostics.mcp.attach import incident_environment
from diagnostics.models import ActionRequest
from diagnostics.recording import DatabaseActionLedger, run_trajectory
from diagnostics.services import recovery
from diagnostics.services.trajectories import TRAJECTORY_JOB
from diagnostics.toolsets.registry import UnknownEnvironment

log = logging.getLogger(__name__)


def _send(task: Any, *args: Any) -> None:
    """Sends now; a broker that is down is logged, not raised: the row is the record, and the
    sweeper sends its message again (``SKILLGATE_JOBS_RING_AFTER_S``)."""
    try:
        enqueue(task, *args, queue=conf.get().agent.queue)
    except Exception:
        log.warning("could not send %s%s; the sweeper sends it again", task.name, args, exc_info=True)


def enqueue_diagnosis(trajectory_id: int) -> None:
    _send(run_diagnosis, trajectory_id)


def enqueue_execution(action_request_id: int) -> None:
    _send(execute_action, action_request_id)


def enqueue_recovery(action_request_id: int, attempt: int) -> None:
    _send(recover_action, action_request_id, attempt)


def enqueue_verification(action_request_id: int, delay_s: float) -> None:
    """The check of an executed fix, due in ``delay_s`` (a countdown: the broker holds the message)."""
    try:
        verify_fix.apply_async(
            (action_request_id,), countdown=delay_s, **queue_options(conf.get().agent.queue)
        )
    except Exception:
        log.warning(
            "could not send verify_fix(%s); the sweeper sends it again", action_request_id, exc_info=True
        )


def _heartbeat_s() -> float:
    return jobs_conf.get().heartbeat_s


@shared_task(acks_late=True, ignore_result=True)
def run_diagnosis(trajectory_id: int) -> str:
    trajectory = services.trajectory_claim(trajectory_id=trajectory_id)
    if trajectory is None:
        return "not claimed"
    with jobs.heartbeat(TRAJECTORY_JOB, trajectory.pk, trajectory.attempts, every_s=_heartbeat_s()):
        try:
            run_trajectory(trajectory)
        except UnknownEnvironment as exc:
            services.trajectory_fail(trajectory=trajectory, error=str(exc))
            return "failed"
        except OperationalError:
            # The database went away: the row stays running, its heartbeat stops, and the sweeper
            # requeues it (bounded attempts) once the database is back.
            log.exception("diagnosis of trajectory %s lost its database", trajectory_id)
            return "left to the sweeper"
        except Exception as exc:
            log.exception("diagnosis of trajectory %s failed", trajectory_id)
            services.trajectory_fail(trajectory=trajectory, error=f"{type(exc).__name__}: {exc}")
            return "failed"
    return "done"


class _BeatingLedger(DatabaseActionLedger):
    """The database ledger, plus a heartbeat on the claimed action for as long as its run lasts."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        super().__init__()
        self._stack = stack

    def claim(
        self,
        *,
        action_request_id: int,
        environment: str | None,
        environment_options: dict[str, Any] | None,
    ) -> ClaimedAction | None:
        claimed = super().claim(
            action_request_id=action_request_id,
            environment=environment,
            environment_options=environment_options,
        )
        if claimed is not None:
            attempt = self._claimed[claimed.id].attempts
            self._stack.enter_context(
                jobs.heartbeat(recovery.ACTION_JOB, claimed.id, attempt, every_s=_heartbeat_s())
            )
        return claimed


@shared_task(acks_late=True, ignore_result=True)
def execute_action(action_request_id: int) -> str:
    """Runs an approved action once. Not retried: the claim (committed before the action runs) is the
    record that it started; an interrupted run goes to ``recover_action``, never to a second run."""
    action = ActionRequest.objects.select_related("trajectory__incident").filter(pk=action_request_id).first()
    if action is None or action.status != ActionRequest.Status.APPROVED:
        return "not runnable"
    incident = action.trajectory.incident
    try:
        environment = incident_environment(incident)
    except UnknownEnvironment as exc:
        claimed = services.action_request_claim_execution(action_request_id=action_request_id)
        if claimed is not None:
            services.action_request_refuse(action=claimed, reason=str(exc))
        return "failed"
    with contextlib.ExitStack() as stack:
        result = Executor(environment.write_toolsets(), ledger=_BeatingLedger(stack)).execute(
            action_request_id=action_request_id,
            environment=incident.environment,
            environment_options=incident.environment_options or {},
        )
    return "not claimed" if result is None else result.status


@shared_task(acks_late=True, ignore_result=True)
def recover_action(action_request_id: int, attempt: int) -> str:
    """An action whose run was interrupted: its target re-checked, never the action re-run."""
    action = recovery.action_request_recovery_get(action_request_id=action_request_id, attempt=attempt)
    if action is None:
        return "not ours"
    incident = action.trajectory.incident
    with jobs.heartbeat(recovery.ACTION_JOB, action.pk, attempt, every_s=_heartbeat_s()):
        try:
            environment = incident_environment(incident)
        except UnknownEnvironment as exc:
            health: dict[str, Any] = {"healthy": False, "detail": str(exc)}
        else:
            executor = Executor(environment.write_toolsets(), ledger=DatabaseActionLedger())
            health = executor.recheck(tool=action.tool, args=dict(action.args))
        action = recovery.action_request_recovered(action=action, attempt=attempt, health=health)
    return str(action.status)


@shared_task(acks_late=True, ignore_result=True)
def verify_fix(action_request_id: int) -> str:
    """The symptom observed again after an executed fix (nothing is run): the incident resolved when
    it cleared, diagnosed again when not, the fix proposed for rollback when it made things worse."""
    action = services.action_request_claim_verification(action_request_id=action_request_id)
    if action is None:
        return "not ours"
    incident = action.trajectory.incident
    try:
        environment = incident_environment(incident)
    except UnknownEnvironment as exc:
        observed: dict[str, Any] = {"healthy": False, "detail": str(exc), "system": None, "inverse": None}
    else:
        executor = Executor(environment.write_toolsets(), ledger=DatabaseActionLedger())
        output = str((action.result or {}).get("output", ""))
        observed = executor.observe(tool=action.tool, args=dict(action.args), output=output)
    return str(services.action_request_verified(action=action, observed=observed).verify_status)


@shared_task(acks_late=True, ignore_result=True)
def sweep_jobs() -> dict[str, int]:
    """Beat: lost messages sent again, dead workers' diagnoses requeued, interrupted actions recovered,
    lost or interrupted checks after a fix sent again."""
    swept = {name: len(report) for name, report in recovery.diagnostics_jobs_sweep().items()}
    swept["verifications"] = len(services.action_requests_verification_sweep())
    return swept


@shared_task(acks_late=True, ignore_result=True)
def expire_actions() -> int:
    return services.action_requests_expire()
