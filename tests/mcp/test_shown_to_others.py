"""Issue 40, red team round three (helper h40), what other people see: a gateway write's arguments and
output read by another user's key over /api/ and on the incident page; a key named with controls quoted
in its write's incident; an incident opened over /api/ with controls. Against the running Skillgate with
an MCP server of our own (tests/support/mcp_upstream.py over stdio)."""

from __future__ import annotations

import pytest

from diagnostics import services
from diagnostics.mcp.servers import mcp_grant_set, mcp_server_accept, mcp_server_sync
from diagnostics.models import ActionRequest, Incident
from diagnostics.tasks import execute_action
from routing import scopes
from tests.api.conftest import role_key
from tests.factories import UserFactory, make_key, make_role_key
from tests.mcp.test_first_sight import liar, ran
from tests.mcp.test_red_team_six import SHOWN
from tests.mcp.test_surfaces import call, text

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_gateway_writes_arguments_and_result_reach_no_other_keys_reader_over_rest(
    gateway_url, client, tmp_path, monkeypatch, approver, enqueued
):
    """Data across keys: a write asked through the gateway by one user's key, approved by another and run;
    a third user's read key asks the REST API for the incident, the action and its steps. The arguments
    and the result are its requester's and the approvers' (as get_action over /mcp shows them)."""
    tools = [{"name": "rotate_secret", "description": "Rotates a secret.", "annotations": None,
              "schema": {"type": "object", "properties": {"name": {"type": "string"}}},
              "reply": "new secret: s3cr3t-h40-value"}]  # fmt: skip
    server = liar(tmp_path, monkeypatch, "vault", tools)
    mcp_server_sync(server=server)
    mcp_server_accept(server=server, by=None, note="reviewed")
    agent = make_role_key("agent", "operator", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    asked = text(call(gateway_url + "/mcp/servers/vault", agent.raw, "rotate_secret", {"name": "db-h40-arg"}))
    assert "Approval required" in asked, asked
    action = ActionRequest.objects.get()
    services.action_request_approve(action_request_id=action.pk, user=approver)
    assert execute_action(action.pk) == "executed"
    incident_id = action.trajectory.incident_id
    reader = role_key("viewer", scopes.INCIDENTS_READ).raw
    for path in (f"/api/incidents/{incident_id}", "/api/incidents", f"/api/actions/{action.pk}"):
        answer = client.get(path, HTTP_AUTHORIZATION=f"Bearer {reader}")
        if answer.status_code == 404 and path.startswith("/api/actions"):
            continue
        assert answer.status_code == 200, (path, answer.content[:300])
        body = answer.content.decode()
        assert "s3cr3t-h40-value" not in body and "db-h40-arg" not in body, (path, body[:2000])
    viewer = UserFactory.create(username="viewer-h40", roles=["viewer"])
    client.force_login(viewer)  # the dashboard's incident page, the same rule
    page = client.get(f"/incidents/{incident_id}/")
    assert page.status_code == 200 and "rotate_secret" in page.content.decode()
    assert "s3cr3t-h40-value" not in page.content.decode() and "db-h40-arg" not in page.content.decode()
    client.force_login(approver)
    assert "s3cr3t-h40-value" in client.get(f"/incidents/{incident_id}/").content.decode()
    owner = agent.key.owner
    mine = make_key(name="agent-rest", owner=owner, scopes=[scopes.INCIDENTS_READ]).raw
    shown = client.get(f"/api/incidents/{incident_id}", HTTP_AUTHORIZATION=f"Bearer {mine}").content.decode()
    assert "s3cr3t-h40-value" in shown and "db-h40-arg" in shown  # its requester reads them


def test_a_key_named_with_controls_shows_none_in_the_incident_its_gateway_write_opens(
    gateway_url, tmp_path, monkeypatch
):
    """Controls in every field shown: a user names their key with a bidi override, zero-width, ANSI and
    BEL (the key form takes any text) and asks for a write; the incident's title and description and the
    action's reason, which the approver reads on the page and in Slack, carry none of them."""
    tools = [{"name": "wipe_cache", "description": "Wipes the cache.", "annotations": None, "reply": "wiped"}]
    server = liar(tmp_path, monkeypatch, "named", tools)
    mcp_server_sync(server=server)
    mcp_server_accept(server=server, by=None, note="reviewed")
    owner = UserFactory.create(username="ops")  # a gateway write needs a key with an owner
    agent = make_key(name=f"ops{SHOWN}yek-ypoc", owner=owner, scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    assert "Approval required" in text(call(gateway_url + "/mcp/servers/named", agent.raw, "wipe_cache", {}))
    action = ActionRequest.objects.select_related("trajectory__incident").get()
    incident = action.trajectory.incident
    for shown in (incident.title, incident.description, action.reason):
        assert not (set(SHOWN) - set("[31m2J")) & set(shown), shown
    assert "opsyek-ypoc" in incident.title.replace("[31m", "").replace("2J", "")
    assert ran(tmp_path, "named") == []


def test_an_incident_opened_over_rest_with_controls_shows_none(client):
    """The same rule where every incident is written (services.incident_open): a title and text sent over
    /api/ with a bidi override, zero-width, ANSI and BEL are stored without them."""
    opener = role_key("operator", scopes.INCIDENTS_WRITE).raw
    body = {"title": f"db{SHOWN} down", "text": f"the db{SHOWN} is down\nsince 10:00", "environment": "fake"}
    answer = client.post(
        "/api/incidents", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {opener}"
    )
    assert answer.status_code == 201, answer.content[:300]
    incident = Incident.objects.get()
    for shown in (incident.title, incident.description):
        assert not (set(SHOWN) - set("[31m2J")) & set(shown), shown
    assert "\n" in incident.description
