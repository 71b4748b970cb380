"""kill -9 of a real Celery worker in the middle of each diagnostics job family: a diagnosis, an
approved action's run. A new worker with the sweeper (embedded beat) brings every job to a terminal
state within seconds, and no action runs twice. On the configured broker and database: the file
transport and SQLite by default, Redis and PostgreSQL in CI (.ci/run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User

from diagnostics import services
from diagnostics.models import ActionRequest, Step, Trajectory
from diagnostics.tasks import run_diagnosis
from tests.faults.workers import (
    MAX_ATTEMPTS,
    STALE_AFTER_S,
    SWEEP_EVERY_S,
    Stopwatch,
    fault_worker,
    kill9,
    sweeps_done,
)

# Real workers started, killed and started again: tens of seconds each (make test-slow runs them).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TERMINAL = {Trajectory.Status.SUCCEEDED, Trajectory.Status.FAILED}


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def open_incident(folder: Path, n: int = 0, created_by: User | None = None, **options: object):  # type: ignore[no-untyped-def]
    return services.incident_open(
        title=f"the api service is down ({n})",
        description="the api service is down",
        environment="fault",
        environment_options={"dir": str(folder), **options},
        mode="analyzers",
        created_by=created_by,
    )


def test_a_diagnosis_whose_worker_is_killed_is_rerun_and_every_diagnosis_ends(folder, queue, request):
    (folder / "hold-probe").touch()
    trajectories = [open_incident(folder, n).trajectories.get().pk for n in range(4)]

    with fault_worker("diagnosis-killed", folder, queue) as first:
        first.wait_until("a diagnosis to be mid-probe", lambda: lines(folder / "probes.log"), 60)
        kill9(first)
    killed = Trajectory.objects.get(status=Trajectory.Status.RUNNING)  # the one it was running
    assert Trajectory.objects.filter(status=Trajectory.Status.QUEUED).count() == 3
    (folder / "hold-probe").unlink()

    watch = Stopwatch(request.node.name)
    with fault_worker("diagnosis-sweeper", folder, queue, beat=True) as second:
        second.wait_until(
            "every diagnosis to end",
            lambda: (
                set(Trajectory.objects.filter(pk__in=trajectories).values_list("status", flat=True))
                <= TERMINAL
            ),
            60,
        )
        watch.record("diagnosis rerun after kill -9", stale_after_s=STALE_AFTER_S)

    rows = {t.pk: t for t in Trajectory.objects.filter(pk__in=trajectories)}
    assert {t.status for t in rows.values()} == {Trajectory.Status.SUCCEEDED}
    assert rows[killed.pk].attempts == 2
    assert all(t.attempts == 1 for pk, t in rows.items() if pk != killed.pk)
    note = rows[killed.pk].steps.filter(phase=Step.Phase.NOTE).get()
    assert "Attempt 2" in note.summary and "worker lost" in note.summary
    assert all(t.incident.status == "diagnosed" for t in rows.values())


def test_a_diagnosis_longer_than_the_stale_limit_on_a_live_worker_is_not_requeued(folder, queue):
    """The heartbeat tells a slow job from a dead worker: held for three stale limits, it runs once."""
    (folder / "hold-probe").touch()
    trajectory = open_incident(folder).trajectories.get()
    with fault_worker("diagnosis-slow", folder, queue, beat=True, pool="prefork", concurrency=2) as worker:
        worker.wait_until("the diagnosis to be mid-probe", lambda: lines(folder / "probes.log"), 60)
        sweeps = sweeps_done(worker)
        worker.wait_until(
            "sweeps for three stale limits",
            lambda: sweeps_done(worker) >= sweeps + 3 * STALE_AFTER_S / SWEEP_EVERY_S,
            60,
        )
        (folder / "hold-probe").unlink()
        worker.wait_until(
            "the diagnosis to end",
            lambda: Trajectory.objects.get(pk=trajectory.pk).status == Trajectory.Status.SUCCEEDED,
            60,
        )
    trajectory.refresh_from_db()
    assert trajectory.attempts == 1 and not trajectory.steps.filter(phase=Step.Phase.NOTE).exists()


def _diagnosed_action(folder: Path, requester: User, monkeypatch: pytest.MonkeyPatch) -> ActionRequest:
    """An incident diagnosed here (not on a worker), with its proposed restart of the api."""
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: None)
    trajectory = open_incident(folder, created_by=requester).trajectories.get()
    assert run_diagnosis(trajectory.pk) == "done"
    monkeypatch.undo()
    return ActionRequest.objects.get(trajectory=trajectory)


@pytest.mark.parametrize("healthy", [True, False], ids=["target-healthy", "target-down"])
def test_an_action_whose_worker_is_killed_mid_run_never_runs_twice(
    folder, queue, requester, approver, monkeypatch, healthy, request
):
    action = _diagnosed_action(folder, requester, monkeypatch)
    (folder / "hold-action").touch()

    with fault_worker("action-killed", folder, queue) as first:
        services.action_request_approve(action_request_id=action.pk, user=approver)  # sent on commit
        first.wait_until("the action to be running", lambda: lines(folder / "runs.log"), 60)
        kill9(first)
    action.refresh_from_db()
    assert action.status == ActionRequest.Status.EXECUTING and action.attempts == 1
    (folder / "hold-action").unlink()
    if healthy:
        (folder / "healthy").touch()

    watch = Stopwatch(request.node.name)
    with fault_worker("action-sweeper", folder, queue, beat=True) as second:
        second.wait_until(
            "the interrupted action to be recovered",
            lambda: ActionRequest.objects.get(pk=action.pk).status != ActionRequest.Status.EXECUTING,
            60,
        )
        watch.record("interrupted action recovered", healthy=healthy)
        # Three more sweeps: nothing runs it again.
        sweeps = sweeps_done(second)
        second.wait_until("three more sweeps", lambda: sweeps_done(second) >= sweeps + 3, 30)

    assert len(lines(folder / "runs.log")) == 1  # it ran once, on the killed worker
    action.refresh_from_db()
    assert action.result["interrupted"] is True
    if healthy:
        assert action.status == ActionRequest.Status.EXECUTED and action.result["ok"] is True
        assert action.trajectory.incident.status == "resolved"
        assert not ActionRequest.objects.filter(retry_of=action).exists()
    else:
        assert action.status == ActionRequest.Status.FAILED and action.result["ok"] is False
        again = ActionRequest.objects.get(retry_of=action)
        assert action.result["reapproval"] == again.pk
        assert (again.status, again.tool, again.args) == ("pending", action.tool, action.args)
        assert again.requested_by == requester and again.decided_by is None  # a new approval is needed
        assert action.trajectory.steps.filter(
            phase=Step.Phase.PROPOSE, summary__contains=str(again.pk)
        ).exists()


def test_a_poison_diagnosis_that_kills_its_worker_fails_after_bounded_attempts(folder, queue, request):
    """A task that kills the pool process running it is redelivered at once (reject_on_worker_lost);
    the row counts the claims, so it fails after MAX_ATTEMPTS and the worker goes on with other work."""
    poison = open_incident(folder, 0, poison=True).trajectories.get()

    watch = Stopwatch(request.node.name)
    with fault_worker("poison", folder, queue, beat=True, pool="prefork") as worker:
        worker.wait_until(
            "the poison diagnosis to fail",
            lambda: Trajectory.objects.get(pk=poison.pk).status == Trajectory.Status.FAILED,
            180,
        )
        watch.record("poison diagnosis failed", attempts=MAX_ATTEMPTS)
        healthy = open_incident(folder, 1).trajectories.get()
        worker.wait_until(
            "a healthy diagnosis on the same worker",
            lambda: Trajectory.objects.get(pk=healthy.pk).status == Trajectory.Status.SUCCEEDED,
            120,
        )
        assert worker.proc.poll() is None

    poison.refresh_from_db()
    assert poison.attempts == MAX_ATTEMPTS
    assert "worker lost" in poison.error and f"attempt {MAX_ATTEMPTS} of {MAX_ATTEMPTS}" in poison.error
    # One probe per poisoned attempt, then the two of the healthy diagnosis.
    assert len(lines(folder / "probes.log")) == MAX_ATTEMPTS + 2
    assert poison.incident.status == "failed"
    assert poison.steps.filter(phase=Step.Phase.ERROR).get().summary == poison.error[:2000]
