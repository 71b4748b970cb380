"""Every write route of the server refuses a caller without the role or scope it needs (issue 37,
class 4; round five).

The routes are read from the URL conf, the MCP tool table and the ``/v1`` endpoint table, not listed by
hand: a new route that writes without checking who asks fails here. Each route is sent ``POST``,
``PUT``, ``PATCH`` and ``DELETE`` through the running server, with a valid CSRF token (so the CSRF
check does not hide a missing role check), by three callers who may write nothing: nobody logged in,
a user with no role and a viewer. Each answer must be a refusal (401, 403, 405, or a redirect to a
login page), and nothing stored may change (every row of every table of the project's apps and of
users and groups). ``OPEN`` names the few routes anyone may post to, each with its reason.
``tests/security/test_scopes.py`` holds the finer matrix of ``/api/`` (each scope, each role).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission, User
from django.middleware.csrf import _get_new_csrf_string  # type: ignore[attr-defined]
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from app.mcp import skillgate
from app.mcp.tools import Caller, refusal
from diagnostics import services
from diagnostics.models import McpServer
from routing import scopes
from routing.api.endpoints import ENDPOINTS
from tests.factories import (
    CycleFactory,
    InvocationFactory,
    RouterVersionFactory,
    TaskProfileFactory,
    UserFactory,
    make_key,
)

pytestmark = pytest.mark.django_db(transaction=True)

WRITES = ("POST", "PUT", "PATCH", "DELETE")
CALLERS = ("anonymous", "nobody", "viewer")
LOGIN_PAGES = ("/accounts/login/", "/admin/login/")
# Routes anyone may post to, and why. Everything else must refuse the three callers.
OPEN = {
    "login": "logging in is how a caller gets a role",
    "admin:login": "the admin's own login page",
    "logout": "ends the caller's own session",
    "admin:logout": "ends the caller's own session",
    "password_reset": "mails a reset link to the address of an account, if any (Django's)",
    "password_change": "changes the caller's own password, after the old one (Django's)",
    "slack-events": "Slack's signed requests: an unsigned one is refused before any field is read",
    "slack-commands": "the same",
    "slack-interactions": "the same",
}
# Django's own multi-step pages that need a token in the path (password reset: tested by Django).
SKIPPED = {"password_reset_confirm", "password_reset_complete", "password_reset_done"}


def _routes() -> list[tuple[str, str]]:
    """(name, pattern) of every route of the URL conf."""
    found: list[tuple[str, str]] = []

    def walk(patterns: list[Any], prefix: str, namespace: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                inner = f"{namespace}:{entry.namespace}".strip(":") if entry.namespace else namespace
                walk(entry.url_patterns, prefix + str(entry.pattern), inner)
            elif isinstance(entry, URLPattern):
                pattern = prefix + str(entry.pattern)
                name = f"{namespace}:{entry.name}".strip(":") if entry.name else pattern
                found.append((name, pattern))

    walk(get_resolver().url_patterns, "", "")
    return [(name, pattern) for name, pattern in found if name not in SKIPPED]


def _path(pattern: str, values: dict[str, str]) -> str:
    """A concrete path for a route pattern (``<int:key_id>``, admin's regex groups, ``^...$``)."""

    def fill(match: re.Match[str]) -> str:
        name = match.group("name")
        return values.get(name, "1")

    path = re.sub(r"<(?:\w+:)?(?P<name>\w+)>", fill, pattern)
    path = re.sub(r"\(\?P<(?P<name>\w+)>[^)]*\)", fill, path)
    return "/" + path.lstrip("^").rstrip("$").replace("\\", "")


def _stored() -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the project's apps, users, groups and permissions: what a write would change."""
    models = [
        m for label in ("routing", "diagnostics", "training") for m in apps.get_app_config(label).get_models()
    ]
    models += [User, Group, Permission]
    return {
        m._meta.label: sorted(map(repr, m.objects.order_by().values_list()))  # type: ignore[attr-defined]
        for m in models
    }


def _client(user: User | None) -> Client:
    """A browser of ``user`` (None: nobody logged in) whose writes carry a valid CSRF token, so the
    CSRF check cannot hide a missing role check."""
    token = _get_new_csrf_string()
    client = Client(enforce_csrf_checks=True, HTTP_X_CSRFTOKEN=token)
    client.raise_request_exception = False
    client.cookies["csrftoken"] = token
    if user is not None:
        client.force_login(user)
    return client


def _refused(response: Any) -> bool:
    if response.status_code in (401, 403, 405):
        return True
    if response.status_code in (301, 302, 303, 307, 308):
        return urlsplit(response.headers.get("location", "")).path in LOGIN_PAGES
    return False


@pytest.fixture
def objects(enqueued: list[tuple[str, int]]) -> dict[str, str]:
    """One of every object a route's path names, so a route refuses for who asks, not for a 404."""
    creator = UserFactory.create(username="creator", roles=["operator", "approver"])
    profile = TaskProfileFactory.create(name="write-routes")
    key = make_key(name="write-routes-key").key
    incident = services.incident_open(title="api down", environment="local", created_by=creator)
    trajectory = incident.trajectories.get()
    action = services.action_request_propose(trajectory=trajectory, tool="restart_service", args={"s": "api"})
    server = McpServer.objects.create(
        name="write-routes-mcp", environment="replay", transport="http", url="http://127.0.0.1:9/mcp"
    )
    return {
        "incident_id": str(incident.pk),
        "action_id": str(action.pk),
        "trajectory_id": str(trajectory.pk),
        "key_id": str(key.pk),
        "profile_id": str(profile.pk),
        "cycle_id": str(CycleFactory.create(profile=profile).pk),
        "version_id": str(RouterVersionFactory.create(profile=profile).pk),
        "invocation_id": str(InvocationFactory.create(api_key=key, profile=profile).pk),
        "name": server.name,
        "server": str(server.pk),
        "fmt": "csv",
        "app_label": "routing",
        "object_id": str(key.pk),
    }


def _sweep(
    sends: list[tuple[str, str, str]], objects: dict[str, str], enqueued: list[tuple[str, int]]
) -> None:
    """Each (route name, caller, method) of ``sends`` is refused: a 401, 403 or 405, or a redirect to a
    login page; or the route only reads (it answers the method as it answers GET), having stored and
    queued nothing."""
    users = {"anonymous": None, "nobody": UserFactory.create(username="no-role")}
    users["viewer"] = UserFactory.create(username="a-viewer", roles=["viewer"])
    clients = {who: _client(user) for who, user in users.items()}
    patterns = dict(_routes())
    before, queued = _stored(), list(enqueued)
    through: list[str] = []
    read: dict[tuple[str, str], int] = {}
    for name, who, method in sends:
        path, client = _path(patterns[name], objects), clients[who]
        response = client.generic(method, path, "name=x", "application/x-www-form-urlencoded")
        assert response.status_code < 500, (name, method, who)
        if _refused(response):
            continue
        if (name, who) not in read:
            read[name, who] = client.get(path).status_code
        if response.status_code != read[name, who] or enqueued != queued or _stored() != before:
            through.append(f"{name} {method} {path} by {who}: {response.status_code}")
    assert through == [], "\n".join(through)
    assert _stored() == before, "a refused write changed the stored data"


def _checked_routes() -> list[str]:
    names = [name for name, _ in _routes() if name not in OPEN]
    assert len(names) > 100 and {"web:key-revoke", "api:mcp-server-delete", "admin:index"} <= set(names)
    return names


def test_every_write_route_outside_the_admin_refuses_a_viewer_and_an_anonymous_post(
    objects: dict[str, str], enqueued: list[tuple[str, int]]
) -> None:
    """The default suite's pass: every route but Django admin's, POSTed by a viewer and by nobody
    logged in (a new dashboard or API route that writes without its check fails here)."""
    names = [name for name in _checked_routes() if not name.startswith("admin:")]
    _sweep([(name, who, "POST") for name in names for who in ("anonymous", "viewer")], objects, enqueued)


@pytest.mark.slow
def test_every_write_route_refuses_every_caller_without_a_role_by_every_method(
    objects: dict[str, str], enqueued: list[tuple[str, int]]
) -> None:
    """The whole matrix: every route, POST by each of the three callers; PUT, PATCH and DELETE by each
    too outside Django's admin (whose pages share one mechanism, ``AdminSite.admin_view``)."""
    sends = []
    for name in _checked_routes():
        methods = ("POST",) if name.startswith("admin:") else WRITES
        sends += [(name, who, method) for who in CALLERS for method in methods]
    _sweep(sends, objects, enqueued)


def test_every_mcp_write_tool_refuses_a_key_without_its_scope_or_role() -> None:
    """Skillgate's own MCP tools (``/mcp``): each tool that is not read-only refuses an ``llm`` key, a
    key with every scope whose owner has no role, and an ownerless one."""
    owner = UserFactory.create(username="mcp-nobody")
    keys = {
        "llm": make_key(name="mcp-llm", owner=owner).key,
        "no role": make_key(name="mcp-all", owner=owner, scopes=list(scopes.ALL)).key,
        "ownerless": make_key(name="mcp-ownerless", scopes=list(scopes.ALL)).key,
    }
    writes = [tool for tool in skillgate.TOOLS if not tool.read_only]
    assert {"open_incident", "ask", "propose_action"} <= {tool.name for tool in writes}
    for tool in writes:
        for what, key in keys.items():
            who = Caller(key=key, owner=key.owner)
            assert refusal(tool, who) is not None, (tool.name, what)


def test_every_v1_write_route_refuses_a_caller_without_a_key(
    gateway_url: str, objects: dict[str, str]
) -> None:
    """``/v1`` (the edge's endpoint table): every write method of every row is a 401 without a key,
    and a 403 for a key without the ``llm`` scope."""
    rows = [(row.path, method) for row in ENDPOINTS for method in row.methods if method in WRITES]
    assert ("/v1/responses/{response_id}", "DELETE") in rows and len(rows) >= 7
    ops = make_key(name="no-llm", scopes=[scopes.INCIDENTS_READ])
    before = _stored()
    for template, method in rows:
        path = template.replace("{response_id}", "resp_" + "0" * 32)
        for headers, status in (
            ({}, 401),
            ({"Authorization": f"Bearer {ops.raw}", "x-api-key": ops.raw}, 403),
        ):
            response = httpx.request(method, gateway_url + path, json={}, headers=headers, timeout=30)
            assert response.status_code == status, (method, path, response.text[:200])
    assert _stored() == before
