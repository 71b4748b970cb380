"""Issue 40: a backend's ``api_key_env`` is one of Skillgate's own secrets, whatever its name, at
registration and at every use (diagnostics/mcp/secret_env.py, selectors.upstream_of[_async]).

A custom backend may read its provider key from a variable of any name (here ``ZQX_RELAY_PASS``, on no
deny-list of families). An operator allows ``ZQX_*`` for MCP servers and registers a server that sends
it; later a backend is added that reads its key from that variable. From then on every surface that
connects to the server refuses before a byte is sent: the gateway's tool call, its resources, the API's
and the dashboard's sync, the diagnosis worker's sync, a stdio child's start. Registering or re-pointing
a server to it is refused too. The same server, before the backend existed, did reach the listener (the
control: the test would see a leak)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from mcp import Client as McpClient
from mcp import MCPError

from diagnostics.mcp.secret_env import provider_family
from diagnostics.mcp.servers import mcp_grant_set, mcp_server_sync
from diagnostics.models import McpServer
from routing import scopes
from tests.api.conftest import call as api
from tests.api.conftest import role_key
from tests.factories import BackendFactory, McpServerFactory, McpToolFactory, UserFactory, make_role_key
from tests.mcp.conftest import upstream_command
from tests.mcp.test_secret_env import listener  # noqa: F401  (the recording HTTP listener fixture)
from tests.mcp.test_sse_and_passthrough import session
from tests.mcp.test_surfaces import call, text
from tests.support.fake_environment import FakeEnvironment  # noqa: F401  (registers the "fake" environment)

pytestmark = pytest.mark.django_db(transaction=True)

UNUSUAL = "ZQX_RELAY_PASS"
VALUE = "zqx-provider-key-0451"
REFUSED = f"{UNUSUAL} is one of Skillgate's own secrets"


@pytest.fixture
def allowed(settings, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.MCP_SECRET_ENV_ALLOW = ["MCP_*", "ZQX_*"]
    monkeypatch.setenv(UNUSUAL, VALUE)


def _leaked(seen: list[dict[str, str]]) -> bool:
    return any(VALUE in value for headers in seen for value in headers.values())


def test_a_backend_added_after_registration_is_refused_at_every_use(
    client: Client,
    gateway_url,
    listener,  # noqa: F811  (the fixture imported above)
    allowed,
) -> None:
    url, seen = listener
    admin = role_key("admin", *scopes.ALL)
    registered = api(
        client,
        "POST",
        "/api/mcp/servers",
        admin,
        {
            "name": "relay",
            "environment": "fake",
            "transport": "http",
            "url": url,
            "secret_env": {"X-Key": UNUSUAL},
        },
    )
    assert registered.status_code in (200, 201), registered.json()
    server = McpServer.objects.get(name="relay")
    mcp_server_sync(server=server)
    assert _leaked(seen)  # the control: before the backend existed, the value was sent
    seen.clear()

    BackendFactory.create(name="relay-llm", api_key_env=UNUSUAL, is_active=False)  # inactive: still its key

    report = mcp_server_sync(server=server)  # the diagnosis worker's (sync) path
    assert REFUSED in report.error and "refused its credentials" in report.error and VALUE not in report.error

    synced = api(client, "POST", "/api/mcp/servers/relay/sync", admin, {})  # the event loop's path
    assert REFUSED in str(synced.json()), synced.json()

    user = UserFactory.create(username="page-admin", roles=["admin"])
    client.force_login(user)
    McpServer.objects.filter(pk=server.pk).update(sync_error="")
    assert client.post("/mcp-servers/relay/connect").status_code == 302
    assert REFUSED in McpServer.objects.get(pk=server.pk).sync_error

    McpToolFactory.create(server=server, name="lookup")
    agent = make_role_key("agent", "operator", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    answer = call(gateway_url + "/mcp/servers/relay", agent.raw, "lookup", {"path": "x"})
    assert answer.is_error and REFUSED in text(answer) and VALUE not in text(answer), text(answer)

    async def resources(mcp: McpClient) -> Any:
        try:
            return await mcp.list_resources()
        except MCPError as exc:
            return exc.message

    listed = session(gateway_url + "/mcp/servers/relay", agent.raw, resources)
    assert isinstance(listed, str) and REFUSED in listed, listed

    again = {"name": "relay-two", "environment": "fake", "transport": "http", "url": url}
    refused = api(client, "POST", "/api/mcp/servers", admin, {**again, "secret_env": {"X-Key": UNUSUAL}})
    assert refused.status_code == 400 and UNUSUAL in refused.json()["error"]["message"]
    moved = api(
        client, "POST", "/api/mcp/servers/relay/update", admin, {"secret_env": {"Authorization": UNUSUAL}}
    )
    assert moved.status_code == 400 and UNUSUAL in moved.json()["error"]["message"]
    assert seen == []  # nothing connected after the backend was added


def test_a_stdio_child_is_not_started_with_a_backends_key(tmp_path, allowed, monkeypatch) -> None:
    state = tmp_path / "listings"  # the child counts its listings there
    monkeypatch.setenv("MCP_TEST_UPSTREAM_STATE", str(state))
    child = McpServerFactory.create(
        name="child",
        environment="fake",
        command=upstream_command(),
        secret_env={"UPSTREAM_STATE": "MCP_TEST_UPSTREAM_STATE", "LEAK": UNUSUAL},
    )
    assert mcp_server_sync(server=child).error == ""  # the control: it starts and lists once
    assert state.read_text() == "1"
    BackendFactory.create(name="custom", api_key_env=UNUSUAL)
    report = mcp_server_sync(server=child)
    assert REFUSED in report.error and VALUE not in report.error
    assert state.read_text() == "1"  # never started again


def test_a_backend_that_names_no_variable_makes_its_providers_family_its_own(
    client: Client,
    listener,  # noqa: F811  (the fixture imported above)
    settings,
    monkeypatch,
) -> None:
    """litellm reads a provider's own variable (``ZQXPROV_API_KEY`` for ``zqxprov/...``) when the backend
    names none: that family is the service's own too, at registration and at every use."""
    assert provider_family("zqxprov/big-model") == ("ZQXPROV*",)
    assert provider_family("together_ai/m") == ("TOGETHER_AI*", "TOGETHERAI*")
    assert provider_family("gpt-4o") == provider_family("ai/m") == ()
    url, seen = listener
    settings.MCP_SECRET_ENV_ALLOW = ["MCP_*", "ZQX*"]
    monkeypatch.setenv("ZQXPROV_API_KEY", VALUE)
    server = McpServerFactory.create(
        name="prov",
        environment="fake",
        transport="http",
        command=[],
        url=url,
        secret_env={"X-Key": "ZQXPROV_API_KEY"},
    )
    mcp_server_sync(server=server)
    assert _leaked(seen)  # the control: no backend of that provider yet
    seen.clear()
    BackendFactory.create(name="zqx", model="zqxprov/big-model", api_key_env="")
    report = mcp_server_sync(server=server)
    assert "ZQXPROV_API_KEY is one of Skillgate's own secrets" in report.error and VALUE not in report.error
    admin = role_key("admin", *scopes.ALL)
    body = {"name": "prov-two", "environment": "fake", "transport": "http", "url": url}
    refused = api(
        client, "POST", "/api/mcp/servers", admin, {**body, "secret_env": {"X-Key": "ZQXPROV_API_KEY"}}
    )
    assert refused.status_code == 400 and "ZQXPROV_API_KEY" in refused.json()["error"]["message"]
    assert seen == []
