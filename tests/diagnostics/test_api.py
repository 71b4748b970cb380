"""The incidents REST API: JSON in and out, API-key or session auth, 4xx (never 500) for bad input.

Keys get the scopes they need (tests/security/test_scopes.py checks every scope and role)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from diagnostics import services
from diagnostics.models import ActionRequest, Incident, Step, Trajectory
from routing import scopes
from tests.factories import make_key

pytestmark = pytest.mark.django_db


def post(client: Client, url: str, body: object, key: str | None = None, **extra: str):  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json", headers=headers, **extra)


def get(client: Client, url: str, key: str | None = None):  # type: ignore[no-untyped-def]
    return client.get(url, headers={"Authorization": f"Bearer {key}"} if key else {})


OPERATIONS = [scopes.INCIDENTS_READ, scopes.INCIDENTS_WRITE, scopes.ACTIONS_APPROVE]


@pytest.fixture
def requester_key(requester) -> str:
    return make_key(name="requester", owner=requester, scopes=OPERATIONS).raw


@pytest.fixture
def approver_key(approver) -> str:
    return make_key(
        name="approver", owner=approver, scopes=[scopes.INCIDENTS_READ, scopes.ACTIONS_APPROVE]
    ).raw


def test_open_an_incident_from_free_text_with_an_api_key(
    client, requester, requester_key, no_enqueue, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        resp = post(
            client,
            "/api/incidents",
            {"text": "checkout pods keep restarting in namespace shop", "environment": "fake"},
            requester_key,
        )
    assert resp.status_code == 201, resp.content
    body = resp.json()["incident"]
    incident = Incident.objects.get(pk=body["id"])
    assert (incident.source, incident.created_by, incident.environment) == ("api", requester, "fake")
    assert incident.trigger_key is not None and (incident.trigger, incident.trigger_key.owner) == (
        "key",
        requester,
    )
    assert body["trigger"] == {
        "kind": "key",
        "ref": str(incident.trigger_key_id),
        "key": incident.trigger_key_id,
    }
    assert body["title"] == "checkout pods keep restarting in namespace shop"
    trajectory = incident.trajectories.get()
    assert trajectory.status == Trajectory.Status.QUEUED and no_enqueue == [("diagnosis", trajectory.pk)]


def test_open_incidents_from_an_alertmanager_webhook(client, requester, requester_key, no_enqueue):
    payload = {
        "version": "4",
        "receiver": "skillgate",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "KubePodCrashLooping", "namespace": "shop", "pod": "cart-1"},
                "annotations": {"description": "Pod shop/cart-1 is crash looping."},
                "fingerprint": "3f8a",
            },
            {"status": "firing", "labels": {"alertname": "HighLatency", "service": "api"}, "annotations": {}},
            {"status": "resolved", "labels": {"alertname": "Old"}, "annotations": {}},
        ],
    }
    resp = post(client, "/api/incidents?environment=fake&mode=analyzers", payload, requester_key)
    assert resp.status_code == 201, resp.content
    incidents = resp.json()["incidents"]
    assert [i["title"] for i in incidents] == ["KubePodCrashLooping", "HighLatency"]
    first = Incident.objects.get(pk=incidents[0]["id"])
    assert (
        first.source == "alert" and first.alert["labels"]["pod"] == "cart-1" and first.environment == "fake"
    )
    assert first.trajectories.get().requested_mode == "analyzers"
    # An alert has no human requester; the key that posted it and its owner are recorded.
    assert first.created_by is None and first.trigger == "alert"
    assert first.trigger_ref == "receiver=skillgate fingerprint=3f8a"
    assert first.trigger_key is not None and first.trigger_key.owner == requester
    assert list(first.touches.values_list("user__username", "kind")) == [("requester", "posted_alert")]


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "not_authenticated"),
        ({"Authorization": "Basic abc"}, "invalid_authorization"),
        ({"Authorization": "Bearer sg-000000000000.nope"}, "invalid_api_key"),
    ],
)
def test_authentication_errors_are_json_401(client, headers, code):
    resp = client.post("/api/incidents", data="{}", content_type="application/json", headers=headers)
    assert resp.status_code == 401 and resp.json()["error"]["code"] == code


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ("{not json", 400, "invalid_json"),
        ("[1, 2]", 400, "invalid_json"),
        ({}, 400, "missing_incident"),
        ({"text": 42}, 400, "invalid_field"),
        ({"text": "x", "environment": "mars"}, 400, "unknown_environment"),
        (
            {"text": "x", "environment": "replay", "environment_options": {"case_dir": "/etc"}},
            400,
            "invalid_field",
        ),
        ({"text": "x", "environment_options": {"nested": {"a": 1}}}, 400, "invalid_field"),
        ({"text": "x", "mode": "magic"}, 400, "invalid_field"),
        ({"text": "x", "source": "carrier-pigeon"}, 400, "invalid_field"),
        ({"alerts": "everything is on fire"}, 400, "invalid_alerts"),
        ({"alerts": [{"labels": ["not", "an", "object"]}]}, 400, "invalid_alerts"),
        ({"text": "x", "alert": "not an object"}, 400, "invalid_field"),
    ],
)
def test_bad_requests_are_json_4xx_never_500(client, requester_key, no_enqueue, body, status, code):
    resp = post(client, "/api/incidents", body, requester_key)
    assert resp.status_code == status and resp.json()["error"]["code"] == code, resp.content


def test_unknown_ids_and_wrong_methods(client, requester_key):
    assert get(client, "/api/incidents/999", requester_key).status_code == 404
    assert post(client, "/api/actions/999/approve", {}, requester_key).status_code == 404
    resp = get(client, "/api/actions/1/approve", requester_key)
    assert resp.status_code == 405 and resp.json()["error"]["code"] == "method_not_allowed"


def test_a_session_user_can_read_and_csrf_protects_session_writes(approver, no_enqueue):
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)
    assert client.get("/api/incidents").status_code == 200
    resp = client.post("/api/incidents", data=json.dumps({"text": "x"}), content_type="application/json")
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "csrf_failed"
    approver.groups.add(Group.objects.get(name="operator"))  # opening needs the operator's permission
    client.get("/admin/login/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    resp = client.post(
        "/api/incidents",
        data=json.dumps({"text": "web is slow", "environment": "fake"}),
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert resp.status_code == 201 and Incident.objects.get().created_by == approver
    assert (Incident.objects.get().trigger, Incident.objects.get().trigger_ref) == ("user", str(approver.pk))


def _incident_with_action(requester) -> tuple[Incident, ActionRequest]:
    incident = services.incident_open(title="api down", environment="fake", created_by=requester)
    trajectory = incident.trajectories.get()
    services.step_record(
        trajectory=trajectory, phase=Step.Phase.PROBE, tool="list_processes", summary="api FATAL"
    )
    action = services.action_request_propose(
        trajectory=trajectory, tool="restart_service", args={"service": "api"}
    )
    return incident, action


def test_incident_detail_shows_the_trajectory_steps_and_actions(client, requester, requester_key, no_enqueue):
    incident, action = _incident_with_action(requester)
    resp = get(client, f"/api/incidents/{incident.pk}", requester_key)
    assert resp.status_code == 200
    trajectory = resp.json()["incident"]["trajectories"][0]
    assert [s["tool"] for s in trajectory["steps"]] == ["list_processes"]
    assert trajectory["actions"][0] | {"expires_at": None} == trajectory["actions"][0] | {
        "id": action.pk,
        "tool": "restart_service",
        "status": "pending",
        "requested_by": "requester",
        "plan_hash": action.plan_hash,
        "expires_at": None,
    }


def test_approve_and_deny_over_the_api(
    client, requester, requester_key, approver_key, no_enqueue, django_capture_on_commit_callbacks
):
    _, action = _incident_with_action(requester)
    own = post(client, f"/api/actions/{action.pk}/approve", {}, requester_key)
    assert own.status_code == 403 and own.json()["error"]["code"] == "requester_cannot_decide"
    wrong = post(client, f"/api/actions/{action.pk}/approve", {"plan_hash": 7}, approver_key)
    assert wrong.status_code == 400
    with django_capture_on_commit_callbacks(execute=True):
        ok = post(client, f"/api/actions/{action.pk}/approve", {"plan_hash": action.plan_hash}, approver_key)
    assert ok.status_code == 200 and ok.json()["action"]["status"] == "approved"
    assert ok.json()["action"]["decided_by"] == "approver" and ("execution", action.pk) in no_enqueue
    again = post(client, f"/api/actions/{action.pk}/deny", {}, approver_key)
    assert again.status_code == 409 and again.json()["error"]["code"] == "action_not_pending"


def test_expired_actions_and_ownerless_keys_are_refused(client, requester, approver_key, no_enqueue):
    _, action = _incident_with_action(requester)
    ownerless = make_key(name="bot", scopes=[scopes.ACTIONS_APPROVE]).raw
    refused = post(client, f"/api/actions/{action.pk}/deny", {}, ownerless)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    ActionRequest.objects.filter(pk=action.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    resp = post(client, f"/api/actions/{action.pk}/approve", {}, approver_key)
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "action_expired"
