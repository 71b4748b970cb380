"""The Celery tasks, run through their task functions: claim, diagnose, persist, execute."""

from __future__ import annotations

import pytest

from diagnostics import services
from diagnostics.models import ActionRequest, Incident, Step, Trajectory
from diagnostics.tasks import execute_action, run_diagnosis

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
    assert execute_action(action.pk) == "executed"
    assert execute_action(action.pk) == "not runnable"  # runs once
    assert write_log == [("restart_service", {"service": "api"})]
    incident.refresh_from_db()
    assert incident.status == Incident.Status.RESOLVED
