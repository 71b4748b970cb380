"""Server management over /api/ (issue 40): update (checked again as at registration; a new endpoint makes
every tool new again), delete with the audit kept and browsable, and grants to a team as well as to a
key, checked by the running gateway and /mcp's propose_action on every request."""

from __future__ import annotations

import httpx2
import pytest
from django.contrib.auth.models import Group
from django.test import Client

from diagnostics import services
from diagnostics.mcp.servers import mcp_server_register
from diagnostics.models import McpCall, McpGrant, McpServer, McpTool, McpToolChange
from routing import scopes
from tests.api.conftest import call as api
from tests.api.conftest import role_key
from tests.factories import McpGrantFactory, McpServerFactory, McpToolFactory, make_key, make_role_key
from tests.mcp.conftest import connect
from tests.mcp.test_surfaces import call, text
from tests.support.fake_environment import FakeEnvironment  # noqa: F401  (registers the "fake" environment)


def _listing_status(url: str, key: str) -> int:
    response = httpx2.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"},
    )
    return response.status_code


@pytest.fixture
def web(db: None) -> McpServer:
    """An HTTP server (never connected) with one accepted read tool, a change in its audit and a call."""
    server = mcp_server_register(
        by=None, name="web", environment="fake", transport="http", url="http://127.0.0.1:9/mcp"
    )
    tool = McpToolFactory.create(server=server, name="lookup")
    McpToolChange.objects.create(tool=tool, kind="accepted", note="reviewed")
    McpCall.objects.create(
        surface="gateway", server="web", tool="lookup", args_hash="0" * 64, status="ok", latency_ms=7
    )
    McpGrantFactory.create(server=server)
    return server


@pytest.mark.django_db
def test_an_update_is_checked_like_a_registration_and_a_new_endpoint_makes_every_tool_new(
    client: Client, web: McpServer, settings
) -> None:
    admin = role_key("admin", scopes.MCP_ADMIN)
    path = "/api/mcp/servers/web/update"
    done = api(client, "POST", path, admin, {"timeout_s": 5, "note": "slow upstream"})
    assert done.status_code == 200 and done.json()["server"]["timeout_s"] == 5
    tool = McpTool.objects.get()
    assert tool.present and tool.reviewed_at is not None  # same endpoint: still accepted
    for url in ("http://169.254.169.254/mcp", "ftp://127.0.0.1/mcp", "http://user:pw@127.0.0.1/mcp"):
        refused = api(client, "POST", path, admin, {"url": url})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_field", url
    settings.MCP_URL_ALLOW_PRIVATE = False
    refused = api(client, "POST", path, admin, {"url": "http://127.0.0.1:8000/mcp"})
    assert refused.status_code == 400 and "URL policy" in refused.json()["error"]["message"]
    settings.MCP_URL_ALLOW_PRIVATE = True
    bad = api(client, "POST", path, admin, {"timeout_s": 1e9})
    assert bad.status_code in (400, 422) and bad.status_code != 500
    assert McpServer.objects.get().url == "http://127.0.0.1:9/mcp"  # nothing refused was stored
    stdio = api(client, "POST", path, admin, {"transport": "stdio", "url": "", "command": ["/bin/sh"]})
    assert stdio.status_code == 403 and stdio.json()["error"]["code"] == "program_not_allowed"
    moved = api(
        client,
        "POST",
        path,
        admin,
        {"url": "http://127.0.0.1:10/mcp", "secret_env": {"Authorization": "MCP_TOK"}},
    )
    assert moved.status_code == 200
    server = moved.json()["server"]
    assert server["secret_env"] == {"Authorization": "MCP_TOK"} and server["synced_at"] is None
    tool.refresh_from_db()
    assert not tool.present and tool.reviewed_at is None  # nothing runs it until its next listing is accepted
    kinds = list(McpToolChange.objects.filter(server_name="web").values_list("kind", flat=True))
    assert kinds.count("server_updated") == 2 and "endpoint_changed" in kinds
    off = api(client, "POST", path, admin, {"enabled": False})
    assert off.status_code == 200 and not McpServer.objects.get().enabled
    assert McpToolChange.objects.filter(kind="server_disabled", tool_name="lookup").exists()


@pytest.mark.django_db
def test_a_deleted_servers_audit_is_kept_and_browsable(client: Client, web: McpServer) -> None:
    admin = role_key("admin", scopes.MCP_ADMIN)
    changes_before = McpToolChange.objects.count()
    gone = api(client, "POST", "/api/mcp/servers/web/delete", admin, {"note": "decommissioned"})
    assert gone.status_code == 200 and gone.json() == {"deleted": True}
    assert not McpServer.objects.exists() and not McpTool.objects.exists() and not McpGrant.objects.exists()
    # Every earlier change stays, unlinked but named; the deletion itself is recorded by whom.
    assert McpToolChange.objects.count() == changes_before + 2
    assert set(McpToolChange.objects.values_list("tool_id", flat=True)) == {None}
    viewer = role_key("viewer", scopes.MCP_ADMIN)
    changes = api(client, "GET", "/api/mcp/audit?server=web", viewer).json()
    assert changes["rows"][0]["what"] == "server_deleted"
    assert {r["what"] for r in changes["rows"]} == {"accepted", "server_deleted"}
    assert any(r["by"] == admin.key.owner.username for r in changes["rows"])
    one_tool = api(client, "GET", "/api/mcp/audit?server=web&tool=lookup&limit=1", viewer).json()
    assert len(one_tool["rows"]) == 1 and one_tool["next_offset"] == 1
    calls = api(client, "GET", "/api/mcp/audit?kind=calls&server=web", viewer).json()
    assert [(r["tool"], r["what"]) for r in calls["rows"]] == [("lookup", "gateway ok")]
    for bad in ("?kind=nope", "?limit=0", "?server=" + "x" * 41):
        assert api(client, "GET", "/api/mcp/audit" + bad, viewer).status_code in (400, 422)
    missing = api(client, "POST", "/api/mcp/servers/web/delete", admin, {})
    assert missing.status_code == 404
    # The name is free again; the new server starts with no tools and no grants.
    again = mcp_server_register(
        by=None, name="web", environment="fake", transport="http", url="http://127.0.0.1:9/mcp"
    )
    assert not again.tools.exists() and not again.grants.exists()


@pytest.mark.django_db
def test_team_grants_are_set_and_revoked_over_the_api(client: Client, web: McpServer) -> None:
    admin = role_key("admin", scopes.MCP_ADMIN)
    Group.objects.create(name="sre")
    granted = api(
        client, "POST", "/api/mcp/servers/web/team-grants", admin, {"team": "sre", "tools": ["lookup"]}
    )
    assert granted.status_code == 200 and granted.json()["grant"] == {
        "team": "sre",
        "server": "web",
        "tools": ["lookup"],
    }
    unknown = api(client, "POST", "/api/mcp/servers/web/team-grants", admin, {"team": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    revoked = api(client, "POST", "/api/mcp/servers/web/team-grants/sre/revoke", admin, {})
    assert revoked.status_code == 200 and not McpGrant.objects.filter(team__name="sre").exists()
    twice = api(client, "POST", "/api/mcp/servers/web/team-grants/sre/revoke", admin, {})
    assert twice.status_code == 404


@pytest.mark.django_db(transaction=True)
def test_a_team_grant_reaches_the_gateway_and_propose_action_while_the_owner_is_in_the_team(
    gateway_url, hostile, enqueued
) -> None:
    connect(hostile)
    team = Group.objects.create(name="sre")
    McpServerFactory.create(name="other")  # a server the team has no grant on
    McpGrant.objects.create(team=team, server=hostile, tools=["status", "touch"])
    member = make_role_key(
        "member", "operator", scopes=[scopes.MCP_GATEWAY, scopes.INCIDENTS_WRITE, scopes.INCIDENTS_READ]
    )
    member.key.owner.groups.add(team)
    outsider = make_role_key("outsider", "operator", scopes=[scopes.MCP_GATEWAY])
    ownerless = make_key(name="ownerless", scopes=[scopes.MCP_GATEWAY])
    url = gateway_url + "/mcp/servers/upstream"

    listed = sorted(t.name for t in call(url, member.raw, None))
    assert listed == ["skillgate_action_result", "status", "touch"]  # the team's tools, not "hang" & co.
    assert text(call(url, member.raw, "status", {})) == "status: ok, 3 replicas ready"
    for stranger in (outsider, ownerless):
        assert _listing_status(url, stranger.raw) == 404  # no grant: the server does not exist for it

    # /mcp's propose_action checks the same grants.
    mcp = gateway_url + "/mcp"
    incident = services.incident_open(title="api down", environment="fake", created_by=outsider.key.owner)
    incident_id = incident.pk
    proposal = {"incident_id": incident_id, "tool": "mcp__upstream__touch", "args": {"line": "x"}}
    proposed = call(mcp, member.raw, "propose_action", proposal)
    assert not proposed.is_error, text(proposed)

    # Out of the team: out of the grant, on the next request.
    member.key.owner.groups.remove(team)
    assert _listing_status(url, member.raw) == 404
    refused = call(mcp, member.raw, "propose_action", proposal)
    assert refused.is_error and "no_grant" in text(refused)
    assert McpCall.objects.filter(key=member.key, tool="status", status="ok").count() == 1
