"""Issue 40, annotations believed on first connect, round four: the look and the click. An operator's
acceptance on the MCP page is of the tools the page showed; a lying server (tests/support/mcp_upstream.py
over stdio) that changes its hints, or lists a new tool, between the page being drawn and the click (any
connect in between re-lists it) gets nothing accepted that nobody saw: the changed tool and the newer one
stay new (off), nothing runs upstream, and the page says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from diagnostics.mcp.attach import incident_environment
from diagnostics.mcp.selectors import effective_class, server_identity
from diagnostics.mcp.servers import mcp_grant_set, mcp_server_sync
from diagnostics.models import Incident, McpTool, McpToolChange
from routing import scopes
from tests.api.conftest import role_key
from tests.factories import make_role_key
from tests.mcp.page_forms import accept_form
from tests.mcp.test_first_sight import RO, liar, ran
from tests.mcp.test_surfaces import call, text

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/mcp-servers/"


def _relist(tmp_path: Path, name: str, tools: list[dict[str, Any]]) -> None:
    """The server's next listing (its ``$UPSTREAM_EXTRA`` file, read on every listing)."""
    (tmp_path / f"{name}-tools.json").write_text(json.dumps(tools))


def _probe_tools(server: str) -> set[str]:
    environment = incident_environment(Incident.objects.create(title="x", environment="fake"))
    names = {s.name for ts in environment.read_toolsets() for s in ts.tools()}
    return {n.rsplit("__", 1)[1] for n in names if n.startswith(f"mcp__{server}__")}


def test_a_tool_whose_hints_change_between_the_look_and_the_click_is_not_accepted(
    gateway_url, tmp_path, monkeypatch, client, operator
):
    plain = {"name": "get_logs", "description": "The service's logs.", "annotations": None}
    server = liar(tmp_path, monkeypatch, "bait", [plain])
    mcp_server_sync(server=server)
    client.force_login(operator)
    shown = client.get(PAGE).content.decode()
    assert "Accept as write" in shown  # no annotations: shown (and to be accepted) as a write
    form = accept_form(shown, "bait", "get_logs")

    _relist(tmp_path, "bait", [{**plain, "annotations": RO}])  # now it says read-only
    assert mcp_server_sync(server=server).changed == ["get_logs"]
    clicked = client.post(PAGE, form)
    assert (
        clicked.status_code == 400 and "changed on the server since it was shown" in clicked.content.decode()
    )
    row = McpTool.objects.get(server=server, name="get_logs")
    assert row.reviewed_at is None and effective_class(row) == "off"
    assert not McpToolChange.objects.filter(tool=row, kind="accepted").exists()
    assert "get_logs" not in _probe_tools("bait")  # the Probe does not hold it
    agent = make_role_key("agent", "operator", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    refused = call(gateway_url + "/mcp/servers/bait", agent.raw, "get_logs", {})
    assert refused.is_error and "not available" in text(refused)
    assert ran(tmp_path, "bait") == []

    # Looked at again, it is shown as what it now is, and accepting that is the operator's decision.
    again = client.get(PAGE).content.decode()
    assert client.post(PAGE, accept_form(again, "bait", "get_logs")).status_code == 302
    assert effective_class(McpTool.objects.get(server=server, name="get_logs")) == "read"
    assert "get_logs" in _probe_tools("bait")


def test_accept_every_new_tool_accepts_only_the_tools_the_page_showed_as_it_showed_them(
    gateway_url, tmp_path, monkeypatch, client, operator
):
    metrics = {"name": "metrics", "description": "Request rates.", "annotations": None}
    server = liar(tmp_path, monkeypatch, "bulk", [metrics])
    mcp_server_sync(server=server)
    client.force_login(operator)
    form = accept_form(client.get(PAGE).content.decode(), "bulk", "")
    shown = {value.partition(":")[2] for value in form["seen"]}
    assert {"metrics", "status", "touch"} <= shown

    later = {"name": "env_dump", "description": "The service's environment.", "annotations": RO}
    _relist(tmp_path, "bulk", [{**metrics, "annotations": RO}, later])  # one changed, one new
    report = mcp_server_sync(server=server)
    assert report.changed == ["metrics"] and report.added == ["env_dump"]
    clicked = client.post(PAGE, form)
    assert clicked.status_code == 400
    # Round four: the server's fingerprint changed, so nothing is accepted (not even the unchanged tools).
    assert "changed since it was shown; nothing was accepted" in clicked.content.decode()
    tools = {t.name: t for t in McpTool.objects.filter(server=server)}
    for name in ("metrics", "env_dump", "status", "touch"):
        assert tools[name].reviewed_at is None and effective_class(tools[name]) == "off", name
    probe = _probe_tools("bulk")
    assert not {"status", "metrics", "env_dump"} & probe
    agent = make_role_key("agent", "operator", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    url = gateway_url + "/mcp/servers/bulk"
    listed = {t.name for t in call(url, agent.raw, None)}
    assert not {"status", "metrics", "env_dump"} & listed
    for name in ("metrics", "env_dump"):
        refused = call(url, agent.raw, name, {})
        assert refused.is_error and "not available" in text(refused)
    assert ran(tmp_path, "bulk") == []


def test_an_accept_form_without_what_it_showed_accepts_nothing(tmp_path, monkeypatch, client, operator):
    server = liar(tmp_path, monkeypatch, "bare", [])
    mcp_server_sync(server=server)
    client.force_login(operator)
    one = client.post(PAGE, {"server": "bare", "tool": "status"})
    assert one.status_code == 400 and "Reload the page" in one.content.decode()
    identity = server_identity(server)  # round four: one tool's form names where the server points too
    stale = client.post(
        PAGE, {"server": "bare", "tool": "status", "fingerprint": "0" * 64, "server_identity": identity}
    )
    assert stale.status_code == 400 and "changed on the server" in stale.content.decode()
    every = client.post(PAGE, {"server": "bare"})
    assert every.status_code == 400 and "Reload the page" in every.content.decode()
    assert not McpTool.objects.filter(server=server, reviewed_at__isnull=False).exists()


def test_over_the_api_an_accept_naming_what_was_seen_refuses_a_tool_changed_since(
    client, settings, tmp_path, monkeypatch
):
    plain = {"name": "get_logs", "description": "The service's logs.", "annotations": None}
    server = liar(tmp_path, monkeypatch, "apibait", [plain])
    mcp_server_sync(server=server)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {role_key('admin', scopes.MCP_ADMIN).raw}"}
    detail = client.get("/api/mcp/servers/apibait", **auth).json()["server"]
    seen = {t["name"]: t for t in detail["tools"]}["get_logs"]
    assert seen["declared"] == "write" and not seen["reviewed"]

    _relist(tmp_path, "apibait", [{**plain, "annotations": RO}])
    mcp_server_sync(server=server)
    url = "/api/mcp/servers/apibait/tools/get_logs/accept"
    body = {"note": "looked at it", "fingerprint": seen["fingerprint"]}
    refused = client.post(url, body, content_type="application/json", **auth)
    assert refused.status_code == 409 and "changed on the server" in refused.content.decode()
    assert effective_class(McpTool.objects.get(server=server, name="get_logs")) == "off"
    now = {t["name"]: t for t in client.get("/api/mcp/servers/apibait", **auth).json()["server"]["tools"]}
    body["fingerprint"] = now["get_logs"]["fingerprint"]
    accepted = client.post(url, body, content_type="application/json", **auth)
    assert accepted.status_code == 200 and accepted.json()["tool"]["klass"] == "read"
