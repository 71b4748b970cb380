"""The MCP operations of ``/api/`` (diagnostics/mcp/api.py): every one refuses a caller without the scope
``mcp:admin`` or without the owner's permission and changes nothing; an admin's key registers the real
filesystem server (npm) over stdio, connects, overrides, accepts, sets output kinds and grants."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from app.api.api import api
from diagnostics.models import McpGrant, McpServer, McpTool, McpToolChange
from routing import scopes
from tests.api.conftest import call, role_key
from tests.factories import McpGrantFactory, McpServerFactory, McpToolFactory, make_key
from tests.mcp.conftest import node_server
from tests.support.fake_environment import FakeEnvironment  # noqa: F401  (registers the "fake" environment)

pytestmark = pytest.mark.django_db

EVERY_SCOPE_BUT_ADMIN = [s for s in scopes.ALL if s != scopes.MCP_ADMIN]

# (method, path template) -> (body, a role whose holders lack the permission)
OPERATIONS: dict[tuple[str, str], tuple[dict[str, Any] | None, str]] = {
    ("get", "/api/mcp/servers"): (None, "none"),
    ("post", "/api/mcp/servers"): (
        {"name": "web", "environment": "fake", "transport": "http", "url": "http://127.0.0.1:9/mcp"},
        "operator",
    ),
    ("get", "/api/mcp/servers/{server}"): (None, "none"),
    ("post", "/api/mcp/servers/{server}/sync"): ({}, "approver"),
    ("post", "/api/mcp/servers/{server}/accept"): ({}, "operator"),
    ("post", "/api/mcp/servers/{server}/allow-list"): ({"tools": ["read_file"]}, "operator"),
    ("post", "/api/mcp/servers/{server}/tools/{tool}/override"): ({"to": "write"}, "viewer"),
    ("post", "/api/mcp/servers/{server}/tools/{tool}/accept"): ({}, "operator"),
    ("post", "/api/mcp/servers/{server}/tools/{tool}/output-kind"): ({"kind": "logs"}, "operator"),
    ("post", "/api/mcp/servers/{server}/tools/{tool}/preset"): ({"arguments": {}}, "operator"),
    ("post", "/api/mcp/servers/{server}/grants"): ({"key_id": 1}, "approver"),
    ("post", "/api/mcp/servers/{server}/grants/{key_id}/revoke"): ({}, "operator"),
    ("post", "/api/mcp/servers/{server}/update"): ({"timeout_s": 5, "enabled": False}, "operator"),
    ("post", "/api/mcp/servers/{server}/delete"): ({}, "operator"),
    ("post", "/api/mcp/servers/{server}/team-grants"): ({"team": "sre"}, "operator"),
    ("post", "/api/mcp/servers/{server}/team-grants/{team}/revoke"): ({}, "operator"),
    ("get", "/api/mcp/audit"): (None, "none"),
}


@pytest.fixture
def tool(db: None) -> McpTool:
    """A registered server with a write tool whose change toward read is held, granted to a key."""
    row = McpToolFactory.create(
        server=McpServerFactory.create(name="fs"),
        name="read_file",
        declared=McpTool.Klass.WRITE,
        pending=McpTool.Klass.READ,
    )
    McpGrantFactory.create(server=row.server)
    McpGrantFactory.create(server=row.server, key=None, team=Group.objects.create(name="sre"))
    return row


def _state() -> tuple[Any, ...]:
    return (
        list(
            McpServer.objects.values_list("name", "allow_list", "synced_at", "timeout_s", "enabled").order_by(
                "pk"
            )
        ),
        list(
            McpTool.objects.values_list(
                "declared", "pending", "override", "output_kind", "preset_args"
            ).order_by("pk")
        ),
        McpToolChange.objects.count(),
        list(McpGrant.objects.values_list("key_id", "team_id", "server_id", "tools").order_by("pk")),
    )


def _path(template: str, tool: McpTool) -> str:
    grant = McpGrant.objects.get(server=tool.server, team=None)
    return template.format(server=tool.server.name, tool=tool.name, key_id=grant.key_id, team="sre")


def test_the_table_names_every_mcp_operation_of_the_document() -> None:
    document = api.get_openapi_schema()
    found = {
        (method, path)
        for path, operations in document["paths"].items()
        if path.startswith("/api/mcp/")
        for method in operations
    }
    assert found == set(OPERATIONS)
    for path, operations in document["paths"].items():
        if path.startswith("/api/mcp/"):
            for operation in operations.values():
                assert 401 in operation["responses"] and operation["security"] == [{"BearerKey": []}]


@pytest.mark.parametrize(("method", "template"), list(OPERATIONS))
def test_a_caller_without_the_scope_or_the_role_is_refused_and_nothing_changes(
    client: Client, tool: McpTool, method: str, template: str
) -> None:
    body, lacking_role = OPERATIONS[(method, template)]
    path = _path(template, tool)
    refusals = [
        (None, 401, "not_authenticated"),
        (role_key("admin", *EVERY_SCOPE_BUT_ADMIN), 403, "missing_scope"),
        (role_key(lacking_role), 403, "permission_denied"),
        (role_key("none"), 403, "permission_denied"),
        (make_key(name="ownerless", scopes=list(scopes.ALL)), 403, "permission_denied"),
    ]
    before = _state()
    for key, status, code in refusals:
        response = call(client, method.upper(), path, key, body)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), (
            key,
            response.content,
        )
    assert _state() == before


def test_a_viewer_with_the_scope_reads_but_cannot_write(client: Client, tool: McpTool) -> None:
    viewer = role_key("viewer", scopes.MCP_ADMIN)
    listed = call(client, "GET", "/api/mcp/servers", viewer)
    assert listed.status_code == 200 and [s["name"] for s in listed.json()["servers"]] == ["fs"]
    detail = call(client, "GET", "/api/mcp/servers/fs", viewer).json()["server"]
    assert [(t["name"], t["klass"], t["pending"]) for t in detail["tools"]] == [
        ("read_file", "write", "read")
    ]
    assert "held for review" in detail["tools"][0]["why"]
    refused = call(client, "POST", "/api/mcp/servers/fs/tools/read_file/accept", viewer, {})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    missing = call(client, "GET", "/api/mcp/servers/nope", viewer)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_an_admin_accepts_a_held_change_once(client: Client, tool: McpTool) -> None:
    admin = role_key("admin", scopes.MCP_ADMIN)
    path = "/api/mcp/servers/fs/tools/read_file/accept"
    accepted = call(client, "POST", path, admin, {"note": "checked the server's release notes"})
    assert accepted.status_code == 200 and accepted.json()["tool"]["klass"] == "read"
    change = McpToolChange.objects.filter(tool=tool).first()
    assert change is not None and (change.kind, change.by.username) == ("accepted", admin.key.owner.username)
    again = call(client, "POST", path, admin, {})
    assert again.status_code == 409 and again.json()["error"]["code"] == "nothing_held"


@pytest.mark.django_db(transaction=True)  # registering and syncing write on the MCP pool's thread
def test_registration_refuses_what_it_cannot_store_or_run(client: Client, settings: Any) -> None:
    admin = role_key("admin", scopes.MCP_ADMIN)
    base = {"name": "logs", "environment": "fake", "transport": "http", "url": "http://127.0.0.1:9/mcp"}
    cases = [
        ({**base, "url": "ftp://example.com/x"}, 400, "invalid_field"),
        ({**base, "url": "file:///etc/passwd"}, 400, "invalid_field"),
        ({**base, "secret_env": {"Authorization": "Bearer abc"}}, 400, "invalid_field"),
        ({**base, "secret_env": {"Bad Header": "TOKEN"}}, 400, "invalid_field"),
        ({**base, "name": "Has Spaces"}, 400, "invalid_field"),
        ({**base, "environment": "nowhere"}, 400, "unknown_environment"),
        ({**base, "timeout_s": 0}, 400, "invalid_field"),
        (
            {**base, "transport": "stdio", "url": "", "command": ["/bin/sh", "-c", "id"]},
            403,
            "program_not_allowed",
        ),
        ({**base, "transport": "stdio", "url": "", "command": []}, 400, "invalid_field"),
    ]
    for body, status, code in cases:
        response = call(client, "POST", "/api/mcp/servers", admin, body)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), (
            body,
            response.content,
        )
    assert not McpServer.objects.exists()
    created = call(client, "POST", "/api/mcp/servers", admin, base)
    assert created.status_code == 201 and created.json()["sync"] is None
    duplicate = call(client, "POST", "/api/mcp/servers", admin, base)
    assert duplicate.status_code == 409 and duplicate.json()["error"]["code"] == "conflict"
    assert McpServer.objects.get().created_by == admin.key.owner


@pytest.mark.django_db(transaction=True)  # registering and syncing write on the MCP pool's thread
def test_an_admin_registers_the_filesystem_server_and_sets_its_tools(
    client: Client, settings: Any, files: Any
) -> None:
    program = node_server("mcp-server-filesystem")
    settings.MCP_API_STDIO_PROGRAMS = [program]
    admin = role_key("admin", scopes.MCP_ADMIN)
    registered = call(
        client,
        "POST",
        "/api/mcp/servers",
        admin,
        {
            "name": "fs",
            "environment": "fake",
            "transport": "stdio",
            "command": [program, str(files)],
            "connect": True,
        },
    )
    assert registered.status_code == 201, registered.content
    answer = registered.json()
    assert answer["sync"]["error"] == "" and "read_text_file" in answer["sync"]["added"]
    classes = {t["name"]: t["klass"] for t in answer["server"]["tools"]}
    assert set(classes.values()) == {"off"}  # new: nothing runs a tool before an operator accepts it
    body = {"note": "reviewed", "fingerprint": answer["server"]["fingerprint"]}
    accepted = call(client, "POST", "/api/mcp/servers/fs/accept", admin, body)
    assert accepted.status_code == 200 and "read_text_file" in accepted.json()["accepted"]
    classes = {t["name"]: t["klass"] for t in accepted.json()["server"]["tools"]}
    assert classes["read_text_file"] == "read" and classes["write_file"] == "write"

    base = "/api/mcp/servers/fs/tools"
    unexplained = call(client, "POST", f"{base}/write_file/override", admin, {"to": "read"})
    assert unexplained.status_code == 400 and unexplained.json()["error"]["code"] == "note_required"
    promoted = call(
        client,
        "POST",
        f"{base}/write_file/override",
        admin,
        {"to": "read", "note": "writes only to a scratch dir"},
    )
    assert promoted.status_code == 200 and promoted.json()["tool"]["klass"] == "read"
    assert "PROMOTED" in promoted.json()["tool"]["why"]
    assert McpToolChange.objects.filter(tool__name="write_file", kind="promoted", by=admin.key.owner).exists()
    demoted = call(client, "POST", f"{base}/read_text_file/override", admin, {"to": "write"})
    assert demoted.json()["tool"]["klass"] == "write"
    cleared = call(client, "POST", f"{base}/read_text_file/override", admin, {"to": "clear"})
    assert cleared.json()["tool"]["klass"] == "read"
    unknown = call(client, "POST", f"{base}/no_such_tool/override", admin, {"to": "write"})
    assert unknown.status_code == 404

    kind = call(client, "POST", f"{base}/read_text_file/output-kind", admin, {"kind": "logs"})
    assert kind.status_code == 200 and kind.json()["tool"]["output_kind"] == "logs"
    bad_kind = call(client, "POST", f"{base}/read_text_file/output-kind", admin, {"kind": "code"})
    assert bad_kind.status_code == 400

    preset = {"arguments": {"path": "/srv/api.log"}}
    set_preset = call(client, "POST", f"{base}/read_text_file/preset", admin, preset)
    assert set_preset.status_code == 200 and set_preset.json()["tool"]["preset_args"] == preset["arguments"]
    change = McpToolChange.objects.filter(tool__name="read_text_file", kind="preset").get()
    assert change.by == admin.key.owner and change.after["preset_args"] == preset["arguments"]
    for bad in ({"nope": "x"}, {"path": ["a"]}, {"path": 3}, {"path": "x" * 5000}):
        refused = call(client, "POST", f"{base}/read_text_file/preset", admin, {"arguments": bad})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_field", bad
    cleared_preset = call(client, "POST", f"{base}/read_text_file/preset", admin, {"arguments": {}})
    assert cleared_preset.json()["tool"]["preset_args"] == {}

    allowed = call(client, "POST", "/api/mcp/servers/fs/allow-list", admin, {"tools": ["read_text_file"]})
    tools = {t["name"]: t["klass"] for t in allowed.json()["server"]["tools"]}
    assert tools["read_text_file"] == "read" and tools["write_file"] == "off"
    synced = call(client, "POST", "/api/mcp/servers/fs/sync", admin, {})
    assert synced.status_code == 200 and synced.json()["sync"]["added"] == []

    agent = make_key(name="agent", scopes=[scopes.MCP_GATEWAY])
    granted = call(
        client, "POST", "/api/mcp/servers/fs/grants", admin, {"key_id": agent.pk, "tools": ["read_text_file"]}
    )
    assert granted.json()["grant"] == {"key_id": agent.pk, "server": "fs", "tools": ["read_text_file"]}
    assert call(client, "POST", "/api/mcp/servers/fs/grants", admin, {"key_id": 99999}).status_code == 404
    revoked = call(client, "POST", f"/api/mcp/servers/fs/grants/{agent.pk}/revoke", admin)
    assert revoked.status_code == 200 and not McpGrant.objects.exists()
    assert call(client, "POST", f"/api/mcp/servers/fs/grants/{agent.pk}/revoke", admin).status_code == 404
