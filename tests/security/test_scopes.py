"""Every ``/api/`` endpoint against every key scope, every role, an ownerless key and session users,
over HTTP against the running server (uvicorn serving app.asgi).

The endpoints are read from the URL resolver, not listed by hand: a new ``/api/`` view that does not
declare its access (``diagnostics/api_auth.py``), or that lets an ``llm``-only key through, fails here.
Only the API's description (``PUBLIC``: the OpenAPI document, the docs page, the JSON 404s) is open.
``EXPECTED`` is the matrix itself: the scope and permission of each method, and which roles hold it.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import Group, User
from django.middleware.csrf import _get_new_csrf_string  # type: ignore[attr-defined]
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from diagnostics import services
from diagnostics.api_auth import Access
from diagnostics.models import ActionRequest, Trajectory
from routing import scopes
from routing.models import ApiKey
from tests.factories import KeyPair, UserFactory, make_key
from tests.support.fake_environment import FakeEnvironment  # noqa: F401  (registers the "fake" environment)

pytestmark = pytest.mark.django_db(transaction=True)

# The first request imports every URL module of the server: give it time on a busy machine.
http = httpx.Client(timeout=60)

ROLES = ("viewer", "operator", "approver", "admin")
READERS = frozenset(ROLES)
OPERATORS = frozenset({"operator", "admin"})
APPROVERS = frozenset({"approver", "admin"})
ADMINS = frozenset({"admin"})


@dataclass(frozen=True)
class Rule:
    scope: str
    permission: str
    roles: frozenset[str]  # the roles (app/web/roles.py) whose holders may do it


EXPECTED: dict[str, dict[str, Rule]] = {
    "diagnostics-incidents": {
        "GET": Rule(scopes.INCIDENTS_READ, "diagnostics.view_incident", READERS),
        "POST": Rule(scopes.INCIDENTS_WRITE, "diagnostics.add_incident", OPERATORS),
    },
    "diagnostics-incident": {"GET": Rule(scopes.INCIDENTS_READ, "diagnostics.view_incident", READERS)},
    "diagnostics-incident-rediagnose": {
        "POST": Rule(scopes.INCIDENTS_WRITE, "diagnostics.add_incident", OPERATORS)
    },
    "diagnostics-action-approve": {
        "POST": Rule(scopes.ACTIONS_APPROVE, "diagnostics.approve_actionrequest", APPROVERS)
    },
    "diagnostics-action-deny": {
        "POST": Rule(scopes.ACTIONS_APPROVE, "diagnostics.approve_actionrequest", APPROVERS)
    },
    "training-cycles": {
        "GET": Rule(scopes.LEARNING_READ, "training.view_cycle", READERS),
        "POST": Rule(scopes.LEARNING_WRITE, "training.add_cycle", OPERATORS),
    },
    "training-cycle": {"GET": Rule(scopes.LEARNING_READ, "training.view_cycle", READERS)},
    "training-runs": {"GET": Rule(scopes.LEARNING_READ, "training.view_trainingrun", READERS)},
    "training-admissions": {"GET": Rule(scopes.LEARNING_READ, "training.view_admission", READERS)},
    # Marking wrong creates an Evolver job: admins only, until a role grants training.add_diagnosticskill.
    "evolver-mark-wrong": {"POST": Rule(scopes.LEARNING_WRITE, "training.add_diagnosticskill", OPERATORS)},
    "evolver-skill": {"GET": Rule(scopes.LEARNING_READ, "training.view_diagnosticskill", READERS)},
    # MCP servers (diagnostics/mcp/api.py): reads for every role, changes for admins.
    "mcp-servers": {
        "GET": Rule(scopes.MCP_ADMIN, "diagnostics.view_mcpserver", READERS),
        "POST": Rule(scopes.MCP_ADMIN, "diagnostics.add_mcpserver", ADMINS),
    },
    "mcp-server": {"GET": Rule(scopes.MCP_ADMIN, "diagnostics.view_mcpserver", READERS)},
    "mcp-server-sync": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.change_mcpserver", ADMINS)},
    "mcp-server-accept": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.change_mcpserver", ADMINS)},
    "mcp-server-allow-list": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.change_mcpserver", ADMINS)},
    "mcp-tool-override": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.change_mcpserver", ADMINS)},
    "mcp-tool-accept": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.change_mcpserver", ADMINS)},
    "mcp-tool-output-kind": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.change_mcpserver", ADMINS)},
    "mcp-tool-preset": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.change_mcpserver", ADMINS)},
    "mcp-server-grants": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.add_mcpgrant", ADMINS)},
    "mcp-server-grant-revoke": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.delete_mcpgrant", ADMINS)},
    # diagnostics/mcp/api_manage.py: update, delete, team grants, the audit.
    "mcp-server-update": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.change_mcpserver", ADMINS)},
    "mcp-server-delete": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.delete_mcpserver", ADMINS)},
    "mcp-server-team-grants": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.add_mcpgrant", ADMINS)},
    "mcp-server-team-grant-revoke": {"POST": Rule(scopes.MCP_ADMIN, "diagnostics.delete_mcpgrant", ADMINS)},
    "mcp-audit": {"GET": Rule(scopes.MCP_ADMIN, "diagnostics.view_mcpserver", READERS)},
}

# Bodies that pass authentication and then touch nothing lasting (an unknown profile, an unfinished
# diagnosis), so one request's success does not change the next one's answer.
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("diagnostics-incidents", "POST"): {"text": "the api is down", "environment": "fake"},
    ("training-cycles", "POST"): {"profile": "no-such-profile"},
    ("evolver-mark-wrong", "POST"): {"note": "it missed the cause"},
}
AUTH_REFUSALS = {"not_authenticated", "missing_scope", "permission_denied", "csrf_failed"}
# What anyone may read: the API's description, and the JSON 404 of an unknown path (app/api/urls.py).
PUBLIC = {"openapi-json", "openapi-view", "api-root", "api-not-found"}


@dataclass(frozen=True)
class Endpoint:
    name: str
    route: str
    view: Any


def api_endpoints() -> list[Endpoint]:
    """Every URL under /api/, from the resolver."""
    found: list[Endpoint] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                found.append(Endpoint(pattern.name or "", prefix + str(pattern.pattern), pattern.callback))

    walk(get_resolver().url_patterns, "")
    return [e for e in found if e.route.startswith("api/") and e.name not in PUBLIC]


@dataclass
class World:
    base: str  # the running server
    ids: dict[str, int]
    users: dict[str, User]

    def path(self, endpoint: Endpoint) -> str:
        def fill(match: re.Match[str]) -> str:
            name = match.group(2)
            assert name in self.ids, f"{endpoint.route}: give the test an object for <{name}>"
            return str(self.ids[name])

        return "/" + re.sub(r"<(?:(\w+):)?(\w+)>", fill, endpoint.route)


@pytest.fixture
def world(gateway_url: str, transactional_db: None, enqueued: list[tuple[str, int]]) -> World:
    users = {role: _user(role, role) for role in ROLES}
    users["none"] = _user("nobody")
    creator = _user("creator", "operator", "approver")
    incident = services.incident_open(title="api down", environment="fake", created_by=creator)
    trajectory = incident.trajectories.get()  # queued: marking it wrong is refused after the checks
    action = services.action_request_propose(
        trajectory=trajectory, tool="restart_service", args={"service": "api"}
    )
    ids = {
        "incident_id": incident.pk,
        "action_id": action.pk,
        "trajectory_id": trajectory.pk,
        "cycle_id": 999999,
        "skill_id": 999999,
        "server": 999999,  # MCP: no such server or tool (404 once past the checks)
        "tool": 999999,
        "key_id": 999999,
        "team": 999999,
    }
    return World(base=gateway_url, ids=ids, users=users)


def _user(username: str, *roles: str) -> User:
    return UserFactory.create(username=username, roles=list(roles))


def _call(
    world: World,
    endpoint: Endpoint,
    method: str,
    headers: dict[str, str],
    cookies: dict[str, str] | None = None,
) -> httpx.Response:
    body = BODIES.get((endpoint.name, method), {}) if method != "GET" else None
    client = httpx.Client(timeout=60, cookies=cookies)  # per call: cookies of one principal
    with client:
        return client.request(method, world.base + world.path(endpoint), json=body, headers=headers)


def _code(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", {}).get("code", ""))
    except ValueError:
        return ""


def _passed_auth(response: httpx.Response) -> bool:
    assert response.status_code < 500, response.text
    return not (response.status_code in (401, 403) and _code(response) in AUTH_REFUSALS)


def _bearer(key: KeyPair) -> dict[str, str]:
    return {"Authorization": f"Bearer {key.raw}"}


def _methods(endpoint: Endpoint) -> list[str]:
    return sorted(getattr(endpoint.view, "access", {}) or {"GET": None, "POST": None})


def _still_serving(world: World) -> None:
    admin = make_key(name="check", owner=world.users["admin"], scopes=[scopes.INCIDENTS_READ])
    assert http.get(f"{world.base}/api/incidents", headers=_bearer(admin)).status_code == 200


# --- the matrix --------------------------------------------------------------------------------------


def test_every_api_endpoint_declares_the_access_of_the_matrix() -> None:
    endpoints = {e.name: e for e in api_endpoints()}
    assert set(endpoints) == set(EXPECTED), "an /api/ endpoint is missing from (or extra in) EXPECTED"
    for name, endpoint in endpoints.items():
        declared = getattr(endpoint.view, "access", None)
        assert declared is not None, f"{endpoint.route} does not use diagnostics.api_auth.endpoint"
        expected = {method: Access(rule.scope, rule.permission) for method, rule in EXPECTED[name].items()}
        assert declared == expected, endpoint.route


def test_only_the_description_of_the_api_is_public(gateway_url: str) -> None:
    """An anonymous caller reads the OpenAPI document and the docs page, and nothing else."""
    document = http.get(f"{gateway_url}/api/openapi.json")
    assert document.status_code == 200 and document.json()["openapi"].startswith("3.")
    assert http.get(f"{gateway_url}/api/docs").status_code == 200
    unknown = http.get(f"{gateway_url}/api/no-such-thing")
    assert unknown.status_code == 404 and _code(unknown) == "not_found"


def test_the_roles_hold_the_permissions_the_matrix_says() -> None:
    for rules in EXPECTED.values():
        for rule in rules.values():
            app_label, codename = rule.permission.split(".")
            holders = {
                group.name
                for group in Group.objects.filter(
                    permissions__codename=codename, permissions__content_type__app_label=app_label
                )
            }
            assert holders & set(ROLES) == rule.roles, rule


def test_an_llm_key_is_refused_on_every_api_endpoint(world: World) -> None:
    """Even an admin's key: a key created with the default scope calls models only."""
    key = make_key(name="llm-only", owner=world.users["admin"])
    assert key.key.scopes == [scopes.LLM]
    for endpoint in api_endpoints():
        for method in _methods(endpoint):
            response = _call(world, endpoint, method, _bearer(key))
            assert response.status_code == 403, (endpoint.route, method, response.text)
            assert _code(response) == "missing_scope" and "needs scope" in response.json()["error"]["message"]
    _still_serving(world)


@pytest.mark.parametrize("scope", scopes.ALL)
def test_a_key_with_one_scope_reaches_only_the_operations_of_that_scope(world: World, scope: str) -> None:
    key = make_key(name=f"only-{scope}", owner=world.users["admin"], scopes=[scope])
    for endpoint in api_endpoints():
        for method, rule in EXPECTED[endpoint.name].items():
            response = _call(world, endpoint, method, _bearer(key))
            allowed = rule.scope == scope
            assert _passed_auth(response) == allowed, (endpoint.route, method, scope, response.text)
            if not allowed:
                assert response.status_code == 403 and _code(response) == "missing_scope"
    _still_serving(world)


@pytest.mark.parametrize("role", [*ROLES, "none"])
def test_a_key_with_every_scope_can_do_only_what_its_owners_role_allows(world: World, role: str) -> None:
    key = make_key(name=f"all-{role}", owner=world.users[role], scopes=list(scopes.ALL))
    for endpoint in api_endpoints():
        for method, rule in EXPECTED[endpoint.name].items():
            response = _call(world, endpoint, method, _bearer(key))
            allowed = role in rule.roles
            assert _passed_auth(response) == allowed, (endpoint.route, method, role, response.text)
            if not allowed:
                assert response.status_code == 403 and _code(response) == "permission_denied"
    _still_serving(world)


def test_an_ownerless_key_has_no_permissions_on_the_api(world: World) -> None:
    key = make_key(name="service", scopes=list(scopes.ALL))
    for endpoint in api_endpoints():
        for method in EXPECTED[endpoint.name]:
            response = _call(world, endpoint, method, _bearer(key))
            assert response.status_code == 403 and _code(response) == "permission_denied", response.text
    _still_serving(world)


def test_a_key_of_a_deactivated_owner_is_refused(world: World) -> None:
    key = make_key(name="leaver", owner=world.users["admin"], scopes=list(scopes.ALL))
    User.objects.filter(pk=world.users["admin"].pk).update(is_active=False)
    response = http.get(f"{world.base}/api/incidents", headers=_bearer(key))
    assert response.status_code == 401 and _code(response) == "invalid_api_key"


def _session(user: User) -> tuple[dict[str, str], dict[str, str]]:
    """A logged-in session's cookies and the CSRF header its writes send."""
    client = Client()
    client.force_login(user)
    token = _get_new_csrf_string()
    cookies = {"sessionid": client.cookies["sessionid"].value, "csrftoken": token}
    return cookies, {"X-CSRFToken": token}


@pytest.mark.parametrize("role", [*ROLES, "none"])
def test_a_session_user_is_checked_by_their_role_alone(world: World, role: str) -> None:
    cookies, csrf = _session(world.users[role])
    for endpoint in api_endpoints():
        for method, rule in EXPECTED[endpoint.name].items():
            response = _call(world, endpoint, method, csrf if method != "GET" else {}, cookies)
            allowed = role in rule.roles
            assert _passed_auth(response) == allowed, (endpoint.route, method, role, response.text)
            if not allowed:
                assert response.status_code == 403 and _code(response) == "permission_denied"
    _still_serving(world)


def test_session_writes_need_the_csrf_token_and_anonymous_calls_are_401(world: World) -> None:
    cookies, _ = _session(world.users["admin"])
    for endpoint in api_endpoints():
        for method in EXPECTED[endpoint.name]:
            anonymous = _call(world, endpoint, method, {})
            assert anonymous.status_code == 401 and _code(anonymous) == "not_authenticated"
            if method != "GET":
                forged = _call(world, endpoint, method, {}, cookies)
                assert forged.status_code == 403 and _code(forged) == "csrf_failed", endpoint.route
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING
    assert Trajectory.objects.count() == 1  # no incident was opened
    _still_serving(world)


# --- where keys come from: only ``llm`` unless someone grants more on purpose ---------------------------


def _secret(content: bytes) -> str:
    shown = re.search(rb"data-secret>([^<]+)<", content)
    assert shown is not None
    return shown.group(1).decode()


def test_a_dashboard_key_of_an_admin_calls_models_only_unless_scopes_are_granted(world: World) -> None:
    """The attack: a key made on the keys page belongs to an admin, whose role includes approve."""
    admin = Client()
    admin.force_login(world.users["admin"])
    created = admin.post("/keys/", {"name": "ci"})
    assert created.status_code == 201
    default = _secret(created.content)
    key = ApiKey.objects.get(name="ci")
    assert key.scopes == [scopes.LLM]
    approve = f"{world.base}/api/actions/{world.ids['action_id']}/approve"
    refused = http.post(approve, json={}, headers={"Authorization": f"Bearer {default}"})
    assert refused.status_code == 403 and _code(refused) == "missing_scope"
    assert ActionRequest.objects.get().status == ActionRequest.Status.PENDING

    granted = admin.post("/keys/", {"name": "reader", "scopes": [scopes.LLM, scopes.INCIDENTS_READ]})
    assert granted.status_code == 201
    assert ApiKey.objects.get(name="reader").scopes == [scopes.LLM, scopes.INCIDENTS_READ]
    reader = _secret(granted.content)
    listed = http.get(f"{world.base}/api/incidents", headers={"Authorization": f"Bearer {reader}"})
    assert listed.status_code == 200
    page = admin.get("/keys/").content.decode()
    assert "<code>incidents:read</code>" in page and page.count("data-scopes") == 2
    unknown = admin.post("/keys/", {"name": "bad", "scopes": ["root"]})
    assert unknown.status_code == 400 and not ApiKey.objects.filter(name="bad").exists()


def test_keys_from_the_service_the_command_and_the_admin_default_to_llm(world: World) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from routing.services import UnknownScopeError, api_key_create

    assert api_key_create(name="plain")[0].scopes == [scopes.LLM]
    with pytest.raises(UnknownScopeError):
        api_key_create(name="bad", scopes=["llm", "everything"])
    call_command("create_api_key", "--name", "cli", stdout=io.StringIO())
    call_command(
        "create_api_key", "--name", "ops", "--scope", "incidents:read", "--scope", "llm", stdout=io.StringIO()
    )
    assert ApiKey.objects.get(name="cli").scopes == [scopes.LLM]
    assert ApiKey.objects.get(name="ops").scopes == [scopes.INCIDENTS_READ, scopes.LLM]
    with pytest.raises(CommandError):
        call_command("create_api_key", "--name", "x", "--scope", "root", stderr=io.StringIO())

    superuser = User.objects.create_superuser("root", "root@example.com", "pw")
    browser = Client()
    browser.force_login(superuser)
    browser.post("/admin/routing/apikey/add/", {"name": "from-admin", "scopes": [scopes.LLM]}, follow=True)
    key = ApiKey.objects.get(name="from-admin")
    assert key.scopes == [scopes.LLM]
    change = f"/admin/routing/apikey/{key.pk}/change/"
    assert 'value="actions:approve"' in browser.get(change).content.decode()
    browser.post(change, {"name": "from-admin", "scopes": [scopes.LLM, scopes.LEARNING_READ]}, follow=True)
    key.refresh_from_db()
    assert key.scopes == [scopes.LLM, scopes.LEARNING_READ]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/messages", {"model": "auto", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"model": "auto", "input": "hi"}),
        ("/v1/embeddings", {"model": "auto", "input": "hi"}),
    ],
)
def test_a_key_without_the_llm_scope_cannot_call_any_model(gateway_url, backends, stub, path, body):
    import httpx

    from routing.models import Invocation
    from tests.factories import make_key

    key = make_key(name="ops-only", scopes=["incidents:read"])
    response = httpx.post(f"{gateway_url}{path}", json=body, headers={"Authorization": f"Bearer {key.raw}"})
    assert response.status_code == 403, response.text
    assert not stub.requests and not Invocation.objects.exists()
