"""Registering and managing an MCP server from the dashboard (issue 41): the form (errors next to the
field), "test the connection" against the real hostile upstream (its tools listed and classified,
nothing saved), register, connect (every tool new), edit (a new endpoint makes the tools new again),
delete after a second look, and the audit browsable on the MCP page (filtered, paged) after the delete.
The same roles as /api/."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from diagnostics.models import McpServer, McpTool, McpToolChange
from tests.factories import UserFactory
from tests.mcp.page_forms import accept_form
from tests.support.fake_environment import FakeEnvironment  # noqa: F401  (registers the "fake" environment)

pytestmark = pytest.mark.django_db

NEW = "/mcp-servers/new/"


@pytest.fixture
def upstream_env(tmp_path, monkeypatch, settings) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The fields of the hostile stdio upstream, its program on the operator's list."""
    monkeypatch.setenv("MCP_TEST_UPSTREAM_LOG", str(tmp_path / "touch.log"))
    settings.MCP_API_STDIO_PROGRAMS = [sys.executable]
    return {
        "name": "liar",
        "environment": "fake",
        "transport": "stdio",
        "command": f"{sys.executable} -m tests.support.mcp_upstream",
        "secret_env": "UPSTREAM_LOG=MCP_TEST_UPSTREAM_LOG",
        "allow_list": "",
        "timeout_s": "8",
        "max_output_bytes": "64000",
    }


def _login(client: Client, role: str) -> User:
    user = UserFactory.create(username=f"the-{role}", roles=[role])
    client.force_login(user)
    return user


def test_a_viewer_sees_the_form_but_cannot_register(client: Client, upstream_env: dict[str, str]) -> None:
    _login(client, "viewer")
    assert client.get(NEW).status_code == 200
    assert client.post(NEW, upstream_env).status_code == 403
    assert client.post("/mcp-servers/liar/connect").status_code == 403
    assert not McpServer.objects.exists()
    client.logout()
    assert client.get(NEW).status_code == 302  # to the login page


def test_bad_values_are_messages_next_to_their_field(client: Client, upstream_env: dict[str, str]) -> None:
    _login(client, "admin")
    http = {**upstream_env, "transport": "http", "command": ""}
    cases: list[tuple[dict[str, Any], str]] = [
        ({**http, "url": "http://169.254.169.254/latest"}, "url"),
        ({**http, "url": "ftp://example.com/x"}, "url"),
        ({**http, "url": ""}, "url"),
        ({**upstream_env, "command": "/bin/sh -c id"}, "command"),
        ({**upstream_env, "command": "'unclosed"}, "command"),
        ({**upstream_env, "secret_env": "TOKEN=sk-live-value-not-a-name"}, "secret_env"),
        ({**upstream_env, "name": "Bad Name"}, "name"),
        ({**upstream_env, "name": "new"}, "name"),  # the form's own address
        ({**upstream_env, "timeout_s": "1e400"}, "timeout_s"),
        ({**upstream_env, "environment": "nowhere"}, "environment"),
    ]
    for data, field in cases:
        response = client.post(NEW, data)
        assert response.status_code == 400, (field, data)
        assert f'data-field-errors="{field}"' in response.content.decode(), (field, data)
    assert not McpServer.objects.exists()


def test_register_test_connect_edit_delete_and_the_audit_kept(
    client: Client, upstream_env: dict[str, str]
) -> None:
    admin = _login(client, "admin")
    tested = client.post(NEW, {**upstream_env, "action": "test"})
    html = tested.content.decode()
    assert tested.status_code == 200 and 'data-test-result="ok"' in html
    assert 'data-tested-tool="status"' in html and 'data-tested-tool="touch"' in html
    split = re.search(r"<span data-tested-split>(.*?)</span>", html)
    classes = re.findall(r'<tr data-tested-tool="[^"]*"><td>.*?</td><td>(\w+)</td>', html, re.S)
    assert split is not None and split.group(1) == "6 read, 1 write"  # the split, as the rows say
    assert sorted(classes) == ["read"] * 6 + ["write"]
    assert not McpServer.objects.exists() and not McpTool.objects.exists()  # nothing saved or accepted

    registered = client.post(NEW, {**upstream_env, "action": "register"})
    assert registered.status_code == 302
    server = McpServer.objects.get(name="liar")
    assert server.created_by == admin and server.synced_at is None
    assert server.command == [sys.executable, "-m", "tests.support.mcp_upstream"]
    taken = client.post(NEW, {**upstream_env, "action": "register"})
    assert taken.status_code == 400 and 'data-field-errors="name"' in taken.content.decode()

    assert client.post("/mcp-servers/liar/connect").status_code == 302
    tools = McpTool.objects.filter(server=server)
    assert tools.filter(name="touch", declared="write").exists()
    assert tools.count() > 2 and not tools.filter(reviewed_at__isnull=False).exists()  # all new
    page = client.get("/mcp-servers/").content.decode()
    assert "waiting for review" in page and 'id="server-liar"' in page

    edit = client.get("/mcp-servers/liar/")
    assert edit.status_code == 200 and "UPSTREAM_LOG=MCP_TEST_UPSTREAM_LOG" in edit.content.decode()
    assert client.post("/mcp-servers/", accept_form(page, "liar")).status_code == 302  # every new tool
    assert not tools.filter(reviewed_at__isnull=True).exists()
    saved = client.post("/mcp-servers/liar/", {**upstream_env, "timeout_s": "5"})
    assert saved.status_code == 302 and McpServer.objects.get().timeout_s == 5
    assert not tools.filter(reviewed_at__isnull=True).exists()  # same endpoint: still accepted
    refused = client.post(
        "/mcp-servers/liar/", {**upstream_env, "transport": "http", "url": "http://[fe80::1]/"}
    )
    assert refused.status_code == 400 and 'data-field-errors="url"' in refused.content.decode()
    moved = client.post("/mcp-servers/liar/", {**upstream_env, "command": upstream_env["command"] + " --x"})
    assert moved.status_code == 302
    assert not tools.filter(reviewed_at__isnull=False).exists()  # another program: every tool new again

    asked = client.post("/mcp-servers/liar/delete")
    assert asked.status_code == 200 and "data-confirm-step" in asked.content.decode()
    assert McpServer.objects.exists()  # nothing deleted without the second look
    assert client.post("/mcp-servers/liar/delete", {"confirm": "yes"}).status_code == 302
    assert not McpServer.objects.exists() and not McpTool.objects.exists()
    kept = McpToolChange.objects.filter(server_name="liar")
    assert kept.filter(kind="server_deleted", by=admin).exists() and kept.filter(kind="accepted").exists()

    audit = client.get("/mcp-servers/", {"server": "liar", "tool": "touch"}).content.decode()
    assert audit.count("data-audit-row") == kept.filter(tool_name="touch").count() > 3
    assert "server_deleted" in audit and "endpoint_changed" in audit
    first = client.get("/mcp-servers/", {"server": "liar"}).content.decode()
    assert first.count("data-audit-row") == min(50, kept.count())
    if kept.count() > 50:
        assert "data-audit-next" in first
    nothing = client.get("/mcp-servers/", {"server": "nope", "audit": "calls", "page": "x"})
    assert nothing.status_code == 200 and "Nothing recorded for this filter" in nothing.content.decode()


def test_an_operator_without_the_permission_cannot_edit_or_delete(client: Client, upstream_env) -> None:  # type: ignore[no-untyped-def]
    McpServer.objects.create(name="liar", environment="fake", transport="stdio", command=["x"])
    _login(client, "operator")
    assert client.get("/mcp-servers/liar/").status_code == 200
    assert client.post("/mcp-servers/liar/", {**upstream_env, "timeout_s": "5"}).status_code == 403
    assert client.post("/mcp-servers/liar/delete", {"confirm": "yes"}).status_code == 403
    assert client.get("/mcp-servers/nope/").status_code == 404
    assert McpServer.objects.get().timeout_s == 20
