"""Approvals that cannot be gamed, over HTTP against the running server: nobody who triggered or touched
an incident approves its actions (API key, dashboard session, Slack button), an incident without a
human requester still needs an untouched approver, and a plan approved for one environment never runs
in another. After each refusal the service keeps serving: the next, legitimate request works.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.middleware.csrf import _get_new_csrf_string  # type: ignore[attr-defined]
from django.test import Client

from diagnostics import services, tasks
from diagnostics.models import ActionRequest, Incident, IncidentTouch, Trajectory
from diagnostics.toolsets.registry import register_environment
from routing import scopes
from tests.factories import KeyPair, UserFactory, make_key
from tests.support.fake_environment import FakeEnvironment
from tests.support.slack_bot import linked, slack_proposal

pytestmark = pytest.mark.django_db(transaction=True)

OPERATIONS = [scopes.INCIDENTS_READ, scopes.INCIDENTS_WRITE, scopes.ACTIONS_APPROVE]


@register_environment
class ProductionEnvironment(FakeEnvironment):
    """Another environment with the same (recording) write tools: where an attacker would move a plan."""

    name = "fake-production"


@pytest.fixture
def api(gateway_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway_url, timeout=60) as client:
        yield client


def person(username: str, *roles: str) -> User:
    user = UserFactory.create(username=username, roles=list(roles))
    return User.objects.get(pk=user.pk)  # drop the permission cache


def key_of(user: User, *granted: str) -> KeyPair:
    return make_key(name=f"{user.username}-{len(granted)}", owner=user, scopes=list(granted or OPERATIONS))


def bearer(key: KeyPair) -> dict[str, str]:
    return {"Authorization": f"Bearer {key.raw}"}


def propose(incident: Incident) -> ActionRequest:
    """What the diagnosis would propose (the agent's own call), on the incident's latest trajectory."""
    trajectory = incident.trajectories.order_by("-pk").first()
    assert trajectory is not None
    return services.action_request_propose(
        trajectory=trajectory, tool="restart_service", args={"service": "api"}
    )


def approve(api: httpx.Client, action: ActionRequest, key: KeyPair) -> httpx.Response:
    return api.post(
        f"/api/actions/{action.pk}/approve", json={"plan_hash": action.plan_hash}, headers=bearer(key)
    )


def code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def still_serving(api: httpx.Client, key: KeyPair) -> None:
    assert api.get("/healthz").status_code == 200
    assert api.get("/api/incidents", headers=bearer(key)).status_code == 200


def run(action: ActionRequest) -> str:
    """The execution task, as the worker runs it."""
    return tasks.execute_action(action.pk)


# --- the requester, through each channel -------------------------------------------------------------


def test_the_requester_cannot_approve_with_any_of_their_keys(api, enqueued, write_log) -> None:
    requester = person("rick", "operator", "approver")
    approver = person("anna", "approver")
    opened = api.post(
        "/api/incidents", json={"text": "api down", "environment": "fake"}, headers=bearer(key_of(requester))
    )
    assert opened.status_code == 201, opened.text
    incident = Incident.objects.get(pk=opened.json()["incident"]["id"])
    assert incident.trigger_key is not None
    assert (incident.trigger, incident.trigger_key.owner, incident.created_by) == (
        "key",
        requester,
        requester,
    )
    action = propose(incident)
    assert action.requested_by == requester

    for key in (key_of(requester), key_of(requester, scopes.ACTIONS_APPROVE)):  # the opening key, another one
        refused = approve(api, action, key)
        assert refused.status_code == 403 and code(refused) == "requester_cannot_decide", refused.text
        denied = api.post(f"/api/actions/{action.pk}/deny", json={}, headers=bearer(key))
        assert denied.status_code == 403 and code(denied) == "requester_cannot_decide"
    assert ActionRequest.objects.get(pk=action.pk).status == ActionRequest.Status.PENDING

    approved = approve(api, action, key_of(approver, scopes.ACTIONS_APPROVE))
    assert approved.status_code == 200 and approved.json()["action"]["decided_by"] == "anna"
    assert run(action) == ActionRequest.Status.EXECUTED and write_log == [
        ("restart_service", {"service": "api"})
    ]
    still_serving(api, key_of(approver, scopes.INCIDENTS_READ))


def test_the_owner_of_the_key_that_opened_an_incident_cannot_approve_even_after_the_key_changes_hands(
    api, enqueued
) -> None:
    """The key's owner now is refused too: handing the key to a colleague does not launder the request."""
    operator = person("otto", "operator")
    colleague = person("carl", "approver")
    key = key_of(operator, scopes.INCIDENTS_WRITE)
    opened = api.post("/api/incidents", json={"text": "api down", "environment": "fake"}, headers=bearer(key))
    incident = Incident.objects.get(pk=opened.json()["incident"]["id"])
    action = propose(incident)
    key.key.owner = colleague
    key.key.save(update_fields=["owner"])
    refused = approve(api, action, key_of(colleague, scopes.ACTIONS_APPROVE))
    assert refused.status_code == 403 and code(refused) == "requester_cannot_decide", refused.text
    assert "your API key opened the incident" in refused.json()["error"]["message"]
    approved = approve(api, action, key_of(person("anna", "approver"), scopes.ACTIONS_APPROVE))
    assert approved.status_code == 200


def _session(user: User) -> tuple[dict[str, str], str]:
    client = Client()
    client.force_login(user)
    token = _get_new_csrf_string()
    return {"sessionid": client.cookies["sessionid"].value, "csrftoken": token}, token


def test_the_requester_cannot_approve_in_the_dashboard(gateway_url, enqueued, write_log) -> None:
    requester = person("rick", "operator", "approver")
    cookies, token = _session(requester)
    with httpx.Client(base_url=gateway_url, timeout=60, cookies=cookies) as browser:
        opened = browser.post(
            "/incidents/",
            data={
                "title": "api down",
                "environment": "fake",
                "mode": "analyzers",
                "csrfmiddlewaretoken": token,
            },
        )
        assert opened.status_code == 302, opened.text
        incident = Incident.objects.get()
        assert (incident.trigger, incident.trigger_ref, incident.created_by) == (
            "dashboard",
            str(requester.pk),
            requester,
        )
        action = propose(incident)
        url = f"/incidents/{incident.pk}/actions/{action.pk}/approve"
        refused = browser.post(url, data={"plan_hash": action.plan_hash, "csrfmiddlewaretoken": token})
        assert refused.status_code == 403 and "You requested this action" in refused.text
        assert ActionRequest.objects.get(pk=action.pk).status == ActionRequest.Status.PENDING
        assert browser.get(f"/incidents/{incident.pk}/").status_code == 200  # still serving

    approver_cookies, approver_token = _session(person("anna", "approver"))
    with httpx.Client(base_url=gateway_url, timeout=60, cookies=approver_cookies) as browser:
        data = {"plan_hash": action.plan_hash, "csrfmiddlewaretoken": approver_token}
        second_look = browser.post(url, data=data)  # approving runs a fix: the confirmation step first
        assert second_look.status_code == 200 and ActionRequest.objects.get(pk=action.pk).status == "pending"
        ok = browser.post(url, data={**data, "confirm": "yes"})
    assert ok.status_code == 302
    assert run(action) == ActionRequest.Status.EXECUTED and len(write_log) == 1


def test_the_linked_requester_cannot_approve_with_the_slack_button(
    bot, slack_client, queue, write_log, gateway_url
) -> None:
    requester = linked("rick", "U0RICK", approver=True)
    action, message = slack_proposal(bot, slack_client, queue, user="U0RICK")
    incident = action.trajectory.incident
    assert (incident.trigger, incident.trigger_ref, incident.created_by) == ("slack", "U0RICK", requester)

    assert slack_client.click(message, action_id="approve_action", user="U0RICK").status_code == 200
    queue.drain()
    (ephemeral,) = bot.of("chat.postEphemeral")
    assert "You requested this action" in ephemeral["text"]
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING and write_log == []

    linked("anna", "U0ANNA", approver=True)
    assert slack_client.click(message, action_id="approve_action", user="U0ANNA").status_code == 200
    queue.drain()
    assert ActionRequest.objects.get().status == ActionRequest.Status.EXECUTED and len(write_log) == 1


# --- incidents without a human requester -------------------------------------------------------------


def test_an_unlinked_slack_member_who_opens_an_incident_and_links_later_cannot_approve_it(
    bot, slack_client, queue, write_log
) -> None:
    action, message = slack_proposal(bot, slack_client, queue, user="U0LATE")
    incident = action.trajectory.incident
    assert (incident.created_by, action.requested_by, incident.trigger_ref) == (None, None, "U0LATE")

    linked("lou", "U0LATE", approver=True)  # links the Slack account after opening the incident
    slack_client.click(message, action_id="approve_action", user="U0LATE")
    queue.drain()
    (ephemeral,) = bot.of("chat.postEphemeral")
    assert "your Slack account opened the incident" in ephemeral["text"]
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING and write_log == []

    linked("anna", "U0ANNA", approver=True)
    slack_client.click(message, action_id="approve_action", user="U0ANNA")
    queue.drain()
    assert ActionRequest.objects.get().status == ActionRequest.Status.EXECUTED and len(write_log) == 1


def test_an_alert_incident_is_approved_only_by_someone_who_did_not_touch_it(api, enqueued, write_log) -> None:
    poster = person("paul", "operator", "approver")  # owns the key Alertmanager posts with
    rerunner = person("rita", "operator", "approver")  # asks for another diagnosis
    untouched = person("anna", "approver")
    payload = {
        "receiver": "skillgate",
        "status": "firing",
        "alerts": [
            {"status": "firing", "labels": {"alertname": "ApiDown", "service": "api"}, "fingerprint": "a1"}
        ],
    }
    posted = api.post(
        "/api/incidents?environment=fake",
        json=payload,
        headers=bearer(key_of(poster, scopes.INCIDENTS_WRITE)),
    )
    assert posted.status_code == 201, posted.text
    incident = Incident.objects.get(pk=posted.json()["incidents"][0]["id"])
    assert (incident.created_by, incident.trigger, incident.trigger_ref) == (
        None,
        "alert",
        "receiver=skillgate fingerprint=a1",
    )
    services.trajectory_queue(incident=incident, user=rerunner)  # "re-run the diagnosis"
    assert set(IncidentTouch.objects.values_list("user__username", "kind")) == {
        ("paul", "posted_alert"),
        ("rita", "rediagnosed"),
    }
    action = propose(incident)
    assert action.requested_by is None  # no human requester

    by_poster = approve(api, action, key_of(poster, scopes.ACTIONS_APPROVE))
    assert by_poster.status_code == 403 and code(by_poster) == "requester_cannot_decide", by_poster.text
    by_rerunner = approve(api, action, key_of(rerunner, scopes.ACTIONS_APPROVE))
    assert by_rerunner.status_code == 403 and code(by_rerunner) == "touched_cannot_decide", by_rerunner.text
    assert "queued a diagnosis of this incident" in by_rerunner.json()["error"]["message"]
    assert ActionRequest.objects.get(pk=action.pk).status == ActionRequest.Status.PENDING

    approved = approve(api, action, key_of(untouched, scopes.ACTIONS_APPROVE))
    assert approved.status_code == 200, approved.text
    assert run(action) == ActionRequest.Status.EXECUTED and len(write_log) == 1
    still_serving(api, key_of(untouched, scopes.INCIDENTS_READ))


# --- the environment is part of the plan -------------------------------------------------------------


@pytest.mark.parametrize(
    "moved",
    [
        {"environment": "fake-production", "environment_options": {}},
        {"environment": "fake", "environment_options": {"cluster": "production"}},
    ],
    ids=["environment", "options"],
)
def test_a_plan_approved_for_one_environment_never_runs_in_another(
    api, enqueued, write_log, moved: dict[str, Any]
) -> None:
    requester = person("rick", "operator")
    approver = person("anna", "approver")
    opened = api.post(
        "/api/incidents", json={"text": "api down", "environment": "fake"}, headers=bearer(key_of(requester))
    )
    incident = Incident.objects.get(pk=opened.json()["incident"]["id"])
    action = propose(incident)
    plan = api.get(f"/api/incidents/{incident.pk}", headers=bearer(key_of(approver, scopes.INCIDENTS_READ)))
    assert plan.json()["incident"]["trajectories"][0]["actions"][0]["plan_hash"] == action.plan_hash

    assert approve(api, action, key_of(approver, scopes.ACTIONS_APPROVE)).status_code == 200
    Incident.objects.filter(pk=incident.pk).update(**moved)  # e.g. edited in the admin or the database
    assert run(action) == "not claimed"
    refused = ActionRequest.objects.get(pk=action.pk)
    assert (
        refused.status == ActionRequest.Status.FAILED
        and "changed after approval" in refused.result["refused"]
    )
    assert write_log == []
    assert "Refused to run" in Trajectory.objects.get(actions=refused).steps.get(phase="execute").summary

    # Moved before the approval: the approval itself is refused.
    Incident.objects.filter(pk=incident.pk).update(environment="fake", environment_options={})
    second = propose(incident)
    services.incident_environment_change(incident=incident, user=None, **moved)
    late = approve(api, second, key_of(approver, scopes.ACTIONS_APPROVE))
    assert late.status_code == 409 and code(late) == "plan_changed", late.text
    still_serving(api, key_of(approver, scopes.INCIDENTS_READ))


def test_the_slack_button_carries_the_plan_hash_of_the_environment(
    bot, slack_client, queue, write_log
) -> None:
    linked("rick", "U0RICK", approver=False)
    action, message = slack_proposal(bot, slack_client, queue, user="U0RICK")
    value = json.loads(
        next(e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"])["value"]
    )
    assert value == {"action": action.pk, "plan": action.plan_hash}
    Incident.objects.filter(pk=action.trajectory.incident_id).update(environment="fake-production")
    linked("anna", "U0ANNA", approver=True)
    slack_client.click(message, action_id="approve_action", user="U0ANNA")
    queue.drain()
    (ephemeral,) = bot.of("chat.postEphemeral")
    assert "plan changed" in ephemeral["text"]
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING and write_log == []
