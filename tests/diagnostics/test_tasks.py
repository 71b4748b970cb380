"""The Celery tasks, run through their task functions: claim, diagnose, persist, execute."""

from __future__ import annotations

import pytest

from diagnostics import services
from diagnostics.models import ActionRequest, Incident, Step, Trajectory
from diagnostics.tasks import execute_action, run_diagnosis, verify_fix

pytestmark = pytest.mark.django_db


def test_run_diagnosis_on_a_replay_case_persists_every_step_and_the_diagnosis(settings, no_enqueue):
    from tests.support.fake_environment import CASES

    settings.DIAGNOSTICS_REPLAY_ROOT = str(CASES)
    incident = services.incident_open(
        title="What is the issue with payment-processing-worker?",
        description="What is the issue with payment-processing-worker?",
        environment="replay",
        environment_options={"case": "test_ask_holmes/09_crashpod"},
        mode="analyzers",
    )
    trajectory = incident.trajectories.get()

    assert run_diagnosis(trajectory.pk) == "done"
    assert run_diagnosis(trajectory.pk) == "not claimed"  # a redelivered message does nothing

    trajectory.refresh_from_db()
    incident.refresh_from_db()
    assert trajectory.status == Trajectory.Status.SUCCEEDED and incident.status == Incident.Status.DIAGNOSED
    assert trajectory.mode == "analyzers" and "DEPLOY_ENV" in trajectory.diagnosis
    assert trajectory.findings[0]["kind"] == "missing_env_var"
    steps = list(trajectory.steps.order_by("index"))
    assert [s.index for s in steps] == list(range(1, len(steps) + 1))
    assert steps[0].phase == Step.Phase.ALERT and steps[-1].phase == Step.Phase.SUBMIT
    probes = [s for s in steps if s.phase == Step.Phase.PROBE]
    assert len(probes) == trajectory.tool_calls and sum(s.no_data for s in probes) == trajectory.no_data_calls
    assert any("DEPLOY_ENV" in s.result for s in probes) and all(s.summary for s in probes)


def test_an_unknown_environment_fails_the_trajectory_with_a_clear_error(no_enqueue):
    incident = services.incident_open(title="x", environment="nowhere")
    trajectory = incident.trajectories.get()
    assert run_diagnosis(trajectory.pk) == "failed"
    trajectory.refresh_from_db()
    assert trajectory.status == Trajectory.Status.FAILED and "nowhere" in trajectory.error
    assert trajectory.steps.get().phase == Step.Phase.ERROR


def test_diagnose_propose_approve_execute_heal(
    requester, approver, write_log, no_enqueue, django_capture_on_commit_callbacks
):
    incident = services.incident_open(
        title="the api service is down",
        description="the api service is down",
        environment="fake",
        created_by=requester,
    )
    trajectory = incident.trajectories.get()
    run_diagnosis(trajectory.pk)
    action = ActionRequest.objects.get(trajectory=trajectory)
    assert (action.tool, action.args, action.status) == ("restart_service", {"service": "api"}, "pending")
    assert action.requested_by == requester and write_log == []

    assert execute_action(action.pk) == "not runnable"  # not approved yet
    with django_capture_on_commit_callbacks(execute=True):
        services.action_request_approve(action_request_id=action.pk, user=approver)
    with django_capture_on_commit_callbacks(execute=True):
        assert execute_action(action.pk) == "executed"
    assert execute_action(action.pk) == "not runnable"  # runs once
    assert write_log == [("restart_service", {"service": "api"})]
    incident.refresh_from_db()
    assert incident.status == Incident.Status.VERIFYING  # only the check after the fix resolves it
    assert no_enqueue[-1] == ("verification", action.pk)
    assert verify_fix(action.pk) == "cleared"
    incident.refresh_from_db()
    assert incident.status == Incident.Status.RESOLVED


# --- the row is the record: retries that never repeat a side effect, the sweeper ----------------


def _approved(requester, approver, django_capture_on_commit_callbacks) -> ActionRequest:  # type: ignore[no-untyped-def]
    incident = services.incident_open(
        title="the api service is down",
        description="the api service is down",
        environment="fake",
        created_by=requester,
    )
    run_diagnosis(incident.trajectories.get().pk)
    action = ActionRequest.objects.get(trajectory__incident=incident)
    with django_capture_on_commit_callbacks(execute=True):
        services.action_request_approve(action_request_id=action.pk, user=approver)
    return action


def _sweep(settings):  # type: ignore[no-untyped-def]
    from diagnostics.services.recovery import diagnostics_jobs_sweep

    settings.JOBS_STALE_AFTER_S, settings.JOBS_RING_AFTER_S, settings.JOBS_MAX_ATTEMPTS = 60, 300, 3
    return diagnostics_jobs_sweep()


def _age(model, pk: int, **seconds: int) -> None:  # type: ignore[no-untyped-def]
    from datetime import timedelta

    from django.utils import timezone

    model.objects.filter(pk=pk).update(
        **{field: timezone.now() - timedelta(seconds=s) for field, s in seconds.items()}
    )


@pytest.mark.django_db(transaction=True)  # the write's retry runs outside a transaction
def test_a_database_error_after_the_action_ran_retries_the_write_not_the_action(
    requester, approver, write_log, no_enqueue, django_capture_on_commit_callbacks, monkeypatch
):
    from django.db import OperationalError

    from diagnostics.services import execution

    action = _approved(requester, approver, django_capture_on_commit_callbacks)
    real, failures = execution._finish_once, list[int]()

    def flaky(**kwargs):  # type: ignore[no-untyped-def]
        if not failures:
            failures.append(1)
            raise OperationalError("database is locked")
        return real(**kwargs)

    monkeypatch.setattr(execution, "_finish_once", flaky)
    monkeypatch.setattr(execution.time, "sleep", lambda s: None)

    assert execute_action(action.pk) == "executed"
    assert failures == [1] and write_log == [("restart_service", {"service": "api"})]
    action.refresh_from_db()
    assert (action.status, action.attempts, action.result["ok"]) == ("executed", 1, True)


@pytest.mark.django_db(transaction=True)  # the write's retry runs outside a transaction
def test_an_action_whose_result_could_not_be_written_is_recovered_by_recheck_never_rerun(
    requester, approver, write_log, no_enqueue, django_capture_on_commit_callbacks, monkeypatch, settings
):
    from django.db import OperationalError

    from diagnostics.services import execution
    from diagnostics.tasks import recover_action

    action = _approved(requester, approver, django_capture_on_commit_callbacks)

    def down(**kwargs):  # type: ignore[no-untyped-def]
        raise OperationalError("the database went away")

    monkeypatch.setattr(execution, "_finish_once", down)
    monkeypatch.setattr(execution.time, "sleep", lambda s: None)
    with pytest.raises(OperationalError):
        execute_action(action.pk)
    monkeypatch.undo()
    assert execute_action(action.pk) == "not runnable"  # a redelivery: EXECUTING is never claimed again
    assert _sweep(settings)["actions"].requeued == []  # its heartbeat is fresh

    _age(ActionRequest, action.pk, heartbeat_at=120)
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr("diagnostics.tasks.enqueue_recovery", lambda pk, attempt: sent.append((pk, attempt)))
    with django_capture_on_commit_callbacks(execute=True):
        assert _sweep(settings)["actions"].requeued == [action.pk]
    assert sent == [(action.pk, 2)]
    assert recover_action(action.pk, 1) == "not ours"  # a stale attempt number does nothing
    assert recover_action(action.pk, 2) == "executed"  # the fake target is healthy

    assert write_log == [("restart_service", {"service": "api"})]  # it ran once
    action.refresh_from_db()
    assert action.result["interrupted"] is True and action.health_after["healthy"] is True
    assert action.trajectory.incident.status == Incident.Status.RESOLVED


def test_the_sweeper_sends_lost_messages_again_and_gives_up_after_bounded_attempts(
    no_enqueue, django_capture_on_commit_callbacks, settings
):
    incident = services.incident_open(title="x", environment="fake")
    trajectory = incident.trajectories.get()
    assert _sweep(settings)["trajectories"].rung == []  # sent just now
    _age(Trajectory, trajectory.pk, created_at=400)
    with django_capture_on_commit_callbacks(execute=True):
        assert _sweep(settings)["trajectories"].rung == [trajectory.pk]
    assert no_enqueue[-1] == ("diagnosis", trajectory.pk)

    for attempt in (1, 2, 3):  # each claim's worker dies: heartbeat silent
        assert services.trajectory_claim(trajectory_id=trajectory.pk) is not None
        _age(Trajectory, trajectory.pk, heartbeat_at=120)
        with django_capture_on_commit_callbacks(execute=True):
            report = _sweep(settings)["trajectories"]
        assert (report.requeued, report.given_up) == (
            ([trajectory.pk], []) if attempt < 3 else ([], [trajectory.pk])
        )

    trajectory.refresh_from_db()
    assert (trajectory.status, trajectory.attempts) == (Trajectory.Status.FAILED, 3)
    assert "worker lost" in trajectory.error and "attempt 3 of 3" in trajectory.error
    assert run_diagnosis(trajectory.pk) == "not claimed"  # a late redelivery does nothing


@pytest.mark.django_db(transaction=True)
def test_a_diagnosis_opened_while_the_broker_is_down_is_sent_by_the_sweeper_once_it_is_back(
    monkeypatch, settings, django_capture_on_commit_callbacks
):
    from kombu.exceptions import OperationalError as BrokerDown

    sent: list[tuple[int, ...]] = []

    def down(args, **options):  # type: ignore[no-untyped-def]
        raise BrokerDown("[Errno 111] Connection refused")

    monkeypatch.setattr(run_diagnosis, "apply_async", down)
    incident = services.incident_open(title="the api service is down", environment="fake")  # no error
    trajectory = incident.trajectories.get()
    assert trajectory.status == Trajectory.Status.QUEUED  # the row is the record

    monkeypatch.setattr(run_diagnosis, "apply_async", lambda args, **options: sent.append(tuple(args)))
    _age(Trajectory, trajectory.pk, created_at=400)
    with django_capture_on_commit_callbacks(execute=True):
        assert _sweep(settings)["trajectories"].rung == [trajectory.pk]
    assert sent == [(trajectory.pk,)]
