"""Skillgate as an MCP server (/mcp) and the gated gateway (/mcp/servers/<name>), driven by the official
``mcp`` SDK client over Streamable HTTP against the running Skillgate (uvicorn on a free port)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from app.mcp.skillgate import TOOLS
from diagnostics import services
from diagnostics.mcp.servers import mcp_grant_set
from diagnostics.models import ActionRequest, Incident, McpCall
from diagnostics.tasks import execute_action
from routing import scopes
from tests.factories import make_key, make_role_key

pytestmark = pytest.mark.django_db(transaction=True)


def call(url: str, key: str, tool: str | None, arguments: dict[str, Any] | None = None) -> Any:
    """(tool listing, or the tool's result) through the SDK client with ``Bearer key``."""

    async def go() -> Any:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None) as client,  # type: ignore[arg-type]
        ):
            if tool is None:
                return (await client.list_tools()).tools
            return await client.call_tool(tool, arguments or {})

    return anyio.run(go)


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


ALL = list(scopes.ALL)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_every_skillgate_tool_refuses_a_key_without_its_scope_or_an_owner_without_the_role(gateway_url, tool):
    lacking = make_role_key("lacks-scope", "operator", "approver", scopes=[s for s in ALL if s != tool.scope])
    result = call(gateway_url + "/mcp", lacking.raw, tool.name, {})
    assert result.is_error and "missing_scope" in text(result) and tool.scope in text(result)
    if tool.permission:
        no_role = make_role_key("no-role", scopes=ALL)
        result = call(gateway_url + "/mcp", no_role.raw, tool.name, {})
        assert result.is_error and "permission_denied" in text(result)
    assert Incident.objects.count() == 0 and ActionRequest.objects.count() == 0


def test_the_tools_annotations_are_honest_and_a_bad_key_is_a_401(gateway_url):
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    listed = {t.name: t.annotations for t in call(gateway_url + "/mcp", key.raw, None)}
    assert {n for n, a in listed.items() if a.read_only_hint} == {t.name for t in TOOLS if t.read_only}
    assert (
        listed["propose_action"].destructive_hint is False
        and listed["open_incident"].destructive_hint is False
    )
    response = httpx2.post(gateway_url + "/mcp", json={}, headers={"Authorization": "Bearer sg-nope"})
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"


def test_open_read_and_propose_through_mcp_never_approves(gateway_url, enqueued):
    key = make_role_key(
        "agent", "operator", scopes=[scopes.INCIDENTS_WRITE, scopes.INCIDENTS_READ, scopes.LLM]
    )
    opened = call(
        gateway_url + "/mcp", key.raw, "open_incident", {"text": "the api is down", "environment": "fake"}
    )
    assert not opened.is_error
    incident_id = json.loads(text(opened))["incident"]["id"]
    read = json.loads(text(call(gateway_url + "/mcp", key.raw, "get_incident", {"incident_id": incident_id})))
    assert read["incident"]["title"] == "the api is down"
    proposed = call(
        gateway_url + "/mcp",
        key.raw,
        "propose_action",
        {"incident_id": incident_id, "tool": "restart_service", "args": {"service": "api"}},
    )
    assert not proposed.is_error and json.loads(text(proposed))["action"]["status"] == "pending"
    bad = call(gateway_url + "/mcp", key.raw, "propose_action", {"incident_id": incident_id, "tool": "rm_rf"})
    assert bad.is_error and "unknown_action" in text(bad)
    assert ActionRequest.objects.get().status == "pending"
    usage = json.loads(text(call(gateway_url + "/mcp", key.raw, "usage", {})))
    assert usage["usage"]["key"] == "agent" and usage["usage"]["calls"] == 0


def test_the_gateway_passes_reads_and_turns_a_write_into_an_approval_that_runs_once(
    gateway_url, fs_server, files, approver, enqueued
):
    agent = make_role_key("agent", "operator", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=fs_server, tools=["read_text_file", "write_file"], by=None)
    url = gateway_url + "/mcp/servers/fs"
    listed = {t.name: t for t in call(url, agent.raw, None)}
    assert set(listed) == {"read_text_file", "write_file", "skillgate_action_result"}
    assert listed["read_text_file"].annotations.read_only_hint is True
    assert listed["write_file"].annotations.read_only_hint is False

    read = call(url, agent.raw, "read_text_file", {"path": str(files / "api.log")})
    assert not read.is_error and "DATABASE_URL" in text(read)
    assert call(url, agent.raw, "list_directory", {"path": str(files)}).is_error  # not granted

    target = files / "fixed.txt"
    asked = call(url, agent.raw, "write_file", {"path": str(target), "content": "ok\n"})
    assert asked.is_error and "Approval required" in text(asked) and not target.exists()
    action = ActionRequest.objects.get()
    assert action.tool == "mcp__fs__write_file" and action.status == "pending"
    with pytest.raises(services.ServiceError):  # the key's owner may not approve its own request
        services.action_request_approve(action_request_id=action.pk, user=agent.key.owner)
    services.action_request_approve(action_request_id=action.pk, user=approver)
    assert execute_action(action.pk) == "executed" and execute_action(action.pk) == "not runnable"
    assert target.read_text() == "ok\n"
    fetched = json.loads(text(call(url, agent.raw, "skillgate_action_result", {"request_id": action.pk})))
    assert fetched["status"] == "executed" and fetched["ok"] is True
    rows = list(McpCall.objects.order_by("id").values_list("surface", "tool", "status", "key_id"))
    assert rows == [
        ("gateway", "read_text_file", "ok", agent.key.pk),
        ("gateway", "write_file", "pending", agent.key.pk),
        ("executor", "write_file", "ok", None),
    ]


def test_the_gateway_refuses_keys_without_the_scope_or_a_grant(gateway_url, fs_server):
    granted_no_scope = make_key(name="noscope", scopes=[scopes.LLM])
    mcp_grant_set(key=granted_no_scope.key, server=fs_server, tools=[], by=None)
    scoped_no_grant = make_key(name="nogrant", scopes=[scopes.MCP_GATEWAY])
    for key in (granted_no_scope, scoped_no_grant):
        response = httpx2.post(
            gateway_url + "/mcp/servers/fs",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": f"Bearer {key.raw}", "Accept": "application/json, text/event-stream"},
        )
        assert response.status_code == 404 and "fs" not in response.text.split("No such")[0]


@pytest.mark.slow
def test_upstream_credentials_and_urls_never_reach_the_agent(gateway_url, hostile_http, monkeypatch, db):
    from diagnostics.mcp.servers import mcp_server_register
    from tests.mcp.conftest import connect

    monkeypatch.setenv("MCP_TEST_TOKEN", "Bearer tok-upstream-secret")
    server = mcp_server_register(
        by=None,
        name="secret",
        environment="fake",
        transport="http",
        url=hostile_http,
        secret_env={"Authorization": "MCP_TEST_TOKEN"},
    )
    connect(server)
    agent = make_key(name="agent", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    url = gateway_url + "/mcp/servers/secret"
    assert "3 replicas" in text(call(url, agent.raw, "status", {}))
    failed = call(url, agent.raw, "fail", {})
    assert failed.is_error and "tok-upstream-secret" not in text(failed) and hostile_http not in text(failed)
    assert "[redacted]" in text(failed)
