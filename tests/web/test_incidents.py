"""Incidents pages with Django's test client: who may open, approve and deny, form errors, CSRF,
and a bounded number of queries on the live page."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from diagnostics import services
from diagnostics.models import ActionRequest, Incident, Step, Trajectory

pytestmark = pytest.mark.django_db


@pytest.fixture
def proposed(users: dict[str, User], enqueued: list[tuple[str, int]]) -> ActionRequest:
    """An incident opened by the requester, diagnosed, with a restart proposed (pending)."""
    incident = services.incident_open(title="api is down", environment="local", created_by=users["requester"])
    trajectory = incident.trajectories.get()
    services.step_record(trajectory=trajectory, phase=Step.Phase.ALERT, summary="api is down")
    return services.action_request_propose(
        trajectory=trajectory, tool="restart_service", args={"service": "api"}, reason="api crashed"
    )


def approve(client: Client, action: ActionRequest, **extra: str) -> object:
    url = reverse("web:action-approve", args=[action.trajectory.incident_id, action.pk])
    return client.post(url, {"plan_hash": action.plan_hash, "note": "ok", "confirm": "yes", **extra})


def test_login_is_required_for_every_page(client: Client) -> None:
    for name in ("web:overview", "web:calls", "web:incidents", "web:keys"):
        response = client.get(reverse(name))
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")


def test_a_user_without_a_role_is_refused(login) -> None:
    assert login("nobody").get(reverse("web:incidents")).status_code == 403


def test_a_viewer_sees_no_buttons_and_cannot_approve(login, proposed: ActionRequest) -> None:
    client = login("viewer")
    page = client.get(reverse("web:incident", args=[proposed.trajectory.incident_id]))
    assert page.status_code == 200
    assert b"restart_service" in page.content and b">Approve</button>" not in page.content
    assert b"Waiting for an approver" in page.content

    refused = approve(client, proposed)
    assert refused.status_code == 403
    assert b"not allowed to approve" in refused.content
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.PENDING and proposed.decided_by is None


def test_the_requester_cannot_approve_their_own_action(login, proposed: ActionRequest) -> None:
    client = login("requester")
    page = client.get(reverse("web:incident", args=[proposed.trajectory.incident_id]))
    assert b">Approve</button>" not in page.content and b"someone else must approve" in page.content

    refused = approve(client, proposed)
    assert refused.status_code == 403
    assert b"You requested this action" in refused.content
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.PENDING


def test_an_approver_approves_once_and_the_execution_is_enqueued(
    login, proposed: ActionRequest, users, enqueued, django_capture_on_commit_callbacks
) -> None:
    client = login("approver")
    page = client.get(reverse("web:incident", args=[proposed.trajectory.incident_id]))
    assert b">Approve</button>" in page.content

    with django_capture_on_commit_callbacks(execute=True):
        first = approve(client, proposed)
    assert first.status_code == 302
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.APPROVED and proposed.decided_by == users["approver"]
    assert proposed.decision_note == "ok"
    assert enqueued[-1] == ("execution", proposed.pk)

    again = approve(client, proposed)
    assert again.status_code == 409
    assert b"already approved" in again.content
    assert enqueued.count(("execution", proposed.pk)) == 1
    page = client.get(reverse("web:incident", args=[proposed.trajectory.incident_id]))
    assert b"approved restart_service: ok" in page.content  # the audit trail
    assert b'hx-trigger="every 1s"' in page.content  # follows the execution live


def test_a_changed_plan_is_refused(login, proposed: ActionRequest) -> None:
    response = approve(login("approver"), proposed, plan_hash="0" * 64)
    assert response.status_code == 409
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.PENDING


def test_an_approver_denies_through_htmx_and_gets_the_live_partial(login, proposed: ActionRequest) -> None:
    url = reverse("web:action-deny", args=[proposed.trajectory.incident_id, proposed.pk])
    response = login("approver").post(
        url, {"note": "not now"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="incident-live"
    )
    assert response.status_code == 200
    assert response.content.lstrip().startswith(b'<div id="incident-live"')
    assert b"<html" not in response.content
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.DENIED


def test_an_action_of_another_incident_is_not_found(login, proposed: ActionRequest, enqueued) -> None:
    other = services.incident_open(title="other", environment="local")
    url = reverse("web:action-approve", args=[other.pk, proposed.pk])
    assert login("approver").post(url, {"plan_hash": proposed.plan_hash}).status_code == 404


def test_csrf_is_enforced_on_approvals(users, proposed: ActionRequest) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["approver"])
    assert approve(client, proposed).status_code == 403
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.PENDING


def test_an_operator_opens_an_incident_and_its_diagnosis_is_enqueued(
    login, users, enqueued, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = login("operator").post(
            reverse("web:incidents"),
            {
                "title": "checkout fails",
                "description": "500s since 10:02",
                "environment": "local",
                "mode": "analyzers",
            },
        )
    incident = Incident.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("web:incident", args=[incident.pk])
    assert (incident.source, incident.created_by, incident.environment) == (
        "dashboard",
        users["operator"],
        "local",
    )
    trajectory = incident.trajectories.get()
    assert trajectory.status == Trajectory.Status.QUEUED and trajectory.requested_mode == "analyzers"
    assert enqueued == [("diagnosis", trajectory.pk)]
    page = login("operator").get(response["Location"])
    assert b'hx-trigger="every 1s"' in page.content and b"No step yet" in page.content


def test_the_open_form_shows_clear_errors(login, enqueued) -> None:
    client = login("operator")
    response = client.post(reverse("web:incidents"), {"title": "", "environment": "replay"})
    assert response.status_code == 400
    assert b"This field is required." in response.content
    assert b"The replay environment needs a recorded case." in response.content
    response = client.post(
        reverse("web:incidents"),
        {"title": "x", "environment": "nowhere"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="incident-form",
    )
    assert response.status_code == 400 and b"<html" not in response.content
    assert b"Select a valid choice. nowhere is not one of the available choices." in response.content
    response = client.post(
        reverse("web:incidents"), {"title": "x", "environment": "replay", "case": "../../etc"}
    )
    assert b"inside the replay root" in response.content
    # A name past the file system's 255 bytes (ENAMETOOLONG from is_dir; it was a 500), at the top and below.
    for case, said in (
        ("0" * 300, b"longer than a file name can be"),
        ("a/" + "b" * 290, b"No recorded case"),
    ):
        form = {"title": "x", "environment": "replay", "case": case}
        response = client.post(reverse("web:incidents"), form)
        assert response.status_code == 400 and said in response.content
    assert not Incident.objects.exists() and enqueued == []


def test_viewers_and_approvers_cannot_open_incidents(login, enqueued) -> None:
    for role in ("viewer", "approver"):
        client = login(role)
        assert b"Open an incident" not in client.get(reverse("web:incidents")).content
        response = client.post(reverse("web:incidents"), {"title": "x", "environment": "local"})
        assert response.status_code == 403
    assert not Incident.objects.exists()


def test_the_incident_page_queries_are_bounded(
    login, proposed: ActionRequest, django_assert_max_num_queries
) -> None:
    trajectory = proposed.trajectory
    for i in range(40):
        services.step_record(trajectory=trajectory, phase=Step.Phase.PROBE, tool=f"tool_{i}", summary="seen")
    for _ in range(3):
        services.action_request_propose(
            trajectory=trajectory, tool="restart_service", args={"service": "web"}
        )
    client = login("approver")
    url = reverse("web:incident", args=[trajectory.incident_id])
    with django_assert_max_num_queries(12):
        response = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="incident-live")
    assert response.content.count(b"data-step=") == 41


def test_the_mode_is_written_llm_not_llm_capitalized(login, proposed: ActionRequest) -> None:
    """The model's label for "llm" is Django's default "Llm": the pages write "LLM"."""
    incident = proposed.trajectory.incident
    Trajectory.objects.filter(pk=proposed.trajectory_id).update(mode=Trajectory.Mode.LLM)
    detail = login("operator").get(reverse("web:incident", args=[incident.pk])).content.decode()
    assert "LLM · " in detail and "Llm" not in detail
    listing = login("operator").get(reverse("web:incidents")).content.decode()
    assert '<option value="llm">LLM</option>' in listing and "Llm" not in listing


def test_a_bad_note_is_a_field_message_for_an_approver_and_a_refusal_for_a_viewer(
    login, proposed: ActionRequest
) -> None:
    refused = approve(login("viewer"), proposed, note="a\x00b")  # the role first, then the form
    assert refused.status_code == 403 and b"data-field-errors" not in refused.content
    answer = approve(login("approver"), proposed, note="a\x00b")
    assert answer.status_code == 400 and b'data-field-errors="note"' in answer.content
    assert b"Null characters are not allowed." in answer.content
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.PENDING and proposed.decision_note == ""
    assert approve(login("approver"), proposed, note="n" * 2000).status_code == 302
    proposed.refresh_from_db()
    assert proposed.status == ActionRequest.Status.APPROVED and proposed.decision_note == "n" * 2000
