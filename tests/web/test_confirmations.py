"""Approve (it runs a fix), starting a learning cycle and diagnosing again (they spend) ask first,
without JavaScript too:
a form posted with no confirm=yes gets a confirmation step and changes nothing; the step's own form,
posted as a browser without scripts would post it, does the action."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from diagnostics import services
from diagnostics.models import ActionRequest, Step
from tests.factories import TaskProfileFactory
from tests.factories.diagnostics import IncidentFactory
from training.models import Cycle

pytestmark = pytest.mark.django_db


def _step_form(html: str) -> tuple[str, dict[str, str]]:
    """The confirmation step's form: where it posts and its fields, as a browser would send them."""
    step = html[html.index("data-confirm-step") :]
    form = step[step.index("<form") : step.index("</form>")]
    action = re.search(r'action="([^"]+)"', form)
    assert action is not None
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))
    return action.group(1), fields


def _proposed(users: dict[str, Any]) -> ActionRequest:
    incident = services.incident_open(title="api is down", environment="local", created_by=users["requester"])
    trajectory = incident.trajectories.get()
    services.step_record(trajectory=trajectory, phase=Step.Phase.ALERT, summary="api is down")
    return services.action_request_propose(
        trajectory=trajectory, tool="restart_service", args={"service": "api"}, reason="api crashed"
    )


def test_approve_without_javascript_asks_then_runs_on_the_confirmed_step(
    login, users, enqueued, django_capture_on_commit_callbacks
) -> None:
    action = _proposed(users)
    client: Client = login("approver")
    url = reverse("web:action-approve", args=[action.trajectory.incident_id, action.pk])

    first = client.post(url, {"plan_hash": action.plan_hash, "note": "go"})  # no confirm: no script ran
    assert first.status_code == 200 and b"data-confirm-step" in first.content
    assert b"Run restart_service" in first.content and b"Approve and run it" in first.content
    action.refresh_from_db()
    assert action.status == ActionRequest.Status.PENDING and ("execution", action.pk) not in enqueued

    target, fields = _step_form(first.content.decode())
    assert target == url and fields["confirm"] == "yes" and fields["plan_hash"] == action.plan_hash
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(target, fields).status_code == 302
    action.refresh_from_db()
    assert action.status == ActionRequest.Status.APPROVED and action.decision_note == "go"
    assert enqueued.count(("execution", action.pk)) == 1


def test_confirm_must_say_yes(login, users) -> None:
    action = _proposed(users)
    url = reverse("web:action-approve", args=[action.trajectory.incident_id, action.pk])
    for value in ("", "no", "YES", "yes ", "1", "on"):
        response = login("approver").post(url, {"plan_hash": action.plan_hash, "confirm": value})
        assert response.status_code == 200 and b"data-confirm-step" in response.content
    action.refresh_from_db()
    assert action.status == ActionRequest.Status.PENDING


def test_the_pages_forms_carry_the_confirmation_their_scripts_give(login, users) -> None:
    action = _proposed(users)
    page = (
        login("approver").get(reverse("web:incident", args=[action.trajectory.incident_id])).content.decode()
    )
    approve = page[page.index("data-approve") - 600 : page.index("data-approve")]
    assert "hx-confirm=" in approve and """hx-vals='{"confirm": "yes"}'""" in approve


def test_starting_a_cycle_without_javascript_asks_then_starts_one(login, monkeypatch) -> None:
    monkeypatch.setattr("training.tasks.cycle.enqueue_stage", lambda pk, stage: None)
    profile = TaskProfileFactory.create(name="extract")
    client: Client = login("operator")
    url = reverse("web:cycle-start", args=[profile.pk])
    page = client.get(reverse("web:learning"), {"profile": profile.pk}).content.decode()
    assert "data-confirm=" in page[page.index(url) : page.index("data-start-cycle")]

    first = client.post(url)
    assert first.status_code == 200 and b"data-confirm-step" in first.content
    assert b"spends teacher calls" in first.content and not Cycle.objects.exists()

    target, fields = _step_form(first.content.decode())
    assert client.post(target, fields).status_code == 302
    cycle = Cycle.objects.get()
    assert (cycle.profile_id, cycle.trigger) == (profile.pk, Cycle.Trigger.DASHBOARD)
    assert login("viewer").post(url, {"confirm": "yes"}).status_code == 403  # the role still decides


def test_diagnosing_again_without_javascript_asks_then_queues_one(
    login, users, enqueued, django_capture_on_commit_callbacks
) -> None:
    incident = IncidentFactory.create(title="api is down", created_by=users["requester"])
    client: Client = login("operator")
    url = reverse("web:incident-rediagnose", args=[incident.pk])
    page = client.get(reverse("web:incident", args=[incident.pk])).content.decode()
    form = page[page.index(f'action="{url}"') : page.index("data-rediagnose")]
    assert "hx-confirm=" in form and """hx-vals='{"confirm": "yes"}'""" in form

    first = client.post(url, {"mode": "analyzers"})  # no confirm: no script ran
    assert first.status_code == 200 and b"data-confirm-step" in first.content
    assert b"calls models and tools again" in first.content and not incident.trajectories.exists()

    target, fields = _step_form(first.content.decode())
    assert target == url and (fields["mode"], fields["confirm"]) == ("analyzers", "yes")
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(target, fields).status_code == 302
    trajectory = incident.trajectories.get()
    assert trajectory.requested_mode == "analyzers" and enqueued == [("diagnosis", trajectory.pk)]
    # A bad mode is its field's message before any second look; the role decides before either.
    refused = client.post(url, {"mode": "everything"})
    assert refused.status_code == 400 and b"data-confirm-step" not in refused.content
    assert login("viewer").post(url, {"mode": "analyzers", "confirm": "yes"}).status_code == 403
