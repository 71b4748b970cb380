"""Every write of the operations API refuses a caller who should not have it, and changes nothing.

The writes are read from the OpenAPI document: a new write without a row in ``WRITES`` fails here.
tests/security/test_scopes.py checks the whole matrix (every scope, role, session) over HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.middleware.csrf import _get_new_csrf_string  # type: ignore[attr-defined]
from django.test import Client

from app.api.api import api
from diagnostics.models import ActionRequest, Incident, Trajectory
from routing import scopes
from tests.api.conftest import call, role_key
from tests.factories import UserFactory, make_key
from training.models import Cycle, DiagnosticSkill

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Write:
    scope: str
    denied_role: str  # a role without the permission
    body: dict[str, Any]


WRITES: dict[tuple[str, str], Write] = {
    ("post", "/api/incidents"): Write(
        scopes.INCIDENTS_WRITE, "approver", {"text": "down", "environment": "fake"}
    ),
    ("post", "/api/incidents/{incident_id}/rediagnose"): Write(scopes.INCIDENTS_WRITE, "approver", {}),
    ("post", "/api/actions/{action_id}/approve"): Write(scopes.ACTIONS_APPROVE, "operator", {}),
    ("post", "/api/actions/{action_id}/deny"): Write(scopes.ACTIONS_APPROVE, "operator", {}),
    ("post", "/api/cycles"): Write(scopes.LEARNING_WRITE, "viewer", {"profile": "extract"}),
    ("post", "/api/evolver/trajectories/{trajectory_id}/mark-wrong"): Write(
        scopes.LEARNING_WRITE, "approver", {"note": "it missed the cause"}
    ),
    # MCP (tests/mcp/test_api.py checks that these change nothing on the MCP tables)
    ("post", "/api/mcp/servers"): Write(
        scopes.MCP_ADMIN,
        "operator",
        {"name": "web", "environment": "fake", "transport": "http", "url": "http://x"},
    ),
    ("post", "/api/mcp/servers/{server}/sync"): Write(scopes.MCP_ADMIN, "operator", {}),
    ("post", "/api/mcp/servers/{server}/accept"): Write(scopes.MCP_ADMIN, "operator", {}),
    ("post", "/api/mcp/servers/{server}/allow-list"): Write(scopes.MCP_ADMIN, "operator", {"tools": []}),
    ("post", "/api/mcp/servers/{server}/tools/{tool}/override"): Write(
        scopes.MCP_ADMIN, "approver", {"to": "write"}
    ),
    ("post", "/api/mcp/servers/{server}/tools/{tool}/accept"): Write(scopes.MCP_ADMIN, "operator", {}),
    ("post", "/api/mcp/servers/{server}/tools/{tool}/output-kind"): Write(
        scopes.MCP_ADMIN, "viewer", {"kind": ""}
    ),
    ("post", "/api/mcp/servers/{server}/tools/{tool}/preset"): Write(
        scopes.MCP_ADMIN, "viewer", {"arguments": {}}
    ),
    ("post", "/api/mcp/servers/{server}/grants"): Write(scopes.MCP_ADMIN, "operator", {"key_id": 1}),
    ("post", "/api/mcp/servers/{server}/grants/{key_id}/revoke"): Write(scopes.MCP_ADMIN, "approver", {}),
    ("post", "/api/mcp/servers/{server}/update"): Write(scopes.MCP_ADMIN, "operator", {"timeout_s": 5}),
    ("post", "/api/mcp/servers/{server}/delete"): Write(scopes.MCP_ADMIN, "operator", {}),
    ("post", "/api/mcp/servers/{server}/team-grants"): Write(scopes.MCP_ADMIN, "operator", {"team": "sre"}),
    ("post", "/api/mcp/servers/{server}/team-grants/{team}/revoke"): Write(scopes.MCP_ADMIN, "approver", {}),
}


def _state() -> tuple[Any, ...]:
    return (
        Incident.objects.count(),
        Trajectory.objects.count(),
        list(ActionRequest.objects.values_list("status", flat=True)),
        Cycle.objects.count(),
        DiagnosticSkill.objects.count(),
    )


def _path(template: str, action: ActionRequest) -> str:
    return template.format(
        action_id=action.pk,
        trajectory_id=action.trajectory_id,
        incident_id=action.trajectory.incident_id,
        server="fs",
        tool="read_file",
        key_id=1,
        team="sre",
    )


def test_the_table_names_every_write_of_the_document() -> None:
    document = api.get_openapi_schema()
    writes = {(method, path) for path, ops in document["paths"].items() for method in ops if method != "get"}
    assert writes == set(WRITES)


@pytest.mark.parametrize(("method", "template"), list(WRITES))
def test_a_caller_without_access_is_refused_and_nothing_changes(
    client: Client, action: ActionRequest, method: str, template: str
) -> None:
    write = WRITES[(method, template)]
    path = _path(template, action)
    others = [scope for scope in scopes.ALL if scope != write.scope]
    refusals = [
        (None, 401, "not_authenticated"),
        (
            make_key(name="llm-of-admin", owner=UserFactory.create(username="boss", roles=["admin"])),
            403,
            "missing_scope",
        ),
        (role_key("admin", *others), 403, "missing_scope"),
        (role_key(write.denied_role), 403, "permission_denied"),
        (role_key("none"), 403, "permission_denied"),
        (make_key(name="ownerless", scopes=list(scopes.ALL)), 403, "permission_denied"),
    ]
    before = _state()
    for key, status, code in refusals:
        response = call(client, method.upper(), path, key, write.body)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), (
            key,
            response.content,
        )
    assert _state() == before


@pytest.mark.parametrize(("method", "template"), list(WRITES))
def test_a_session_write_needs_the_role_and_the_csrf_token(
    action: ActionRequest, method: str, template: str
) -> None:
    write = WRITES[(method, template)]
    path = _path(template, action)
    before = _state()

    def session(user: User, csrf: bool) -> Any:
        browser = Client(enforce_csrf_checks=True)
        browser.force_login(user)
        token = _get_new_csrf_string()
        browser.cookies["csrftoken"] = token
        headers = {"X-CSRFToken": token} if csrf else {}
        return browser.post(path, data=write.body, content_type="application/json", headers=headers)

    forged = session(UserFactory.create(username="admin-user", roles=["admin"]), csrf=False)
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "csrf_failed"
    lacking = session(UserFactory.create(username="lacking", roles=[write.denied_role]), csrf=True)
    assert lacking.status_code == 403 and lacking.json()["error"]["code"] == "permission_denied"
    assert _state() == before


def test_the_right_role_and_scope_pass(client: Client, action: ActionRequest) -> None:
    """The counterpart: the same checks let the right caller through (the services decide the rest)."""
    opened = call(
        client,
        "POST",
        "/api/incidents",
        role_key("operator", scopes.INCIDENTS_WRITE),
        WRITES[("post", "/api/incidents")].body,
    )
    assert opened.status_code == 201 and Incident.objects.count() == 2
    approved = call(
        client, "POST", f"/api/actions/{action.pk}/approve", role_key("approver", scopes.ACTIONS_APPROVE)
    )
    assert approved.status_code == 200 and approved.json()["action"]["status"] == "approved"
    unknown = call(
        client, "POST", "/api/cycles", role_key("operator", scopes.LEARNING_WRITE), {"profile": "nope"}
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
