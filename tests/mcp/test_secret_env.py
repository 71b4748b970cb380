"""Issue 40, credentials exfiltration: a registered server's ``secret_env`` may name only variables on
SKILLGATE_MCP_SECRET_ENV_ALLOW, and never one of Skillgate's own (diagnostics/mcp/secret_env.py). An
``mcp:admin`` caller who names DATABASE_URL (or SECRET_KEY, a Slack token, a backend's key) is refused in
each interface's convention, and a row that names one anyway (written before the rule, or edited around
it) connects to nothing: the listener below never sees a request, the stdio child never starts."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import Client

from diagnostics.mcp.secret_env import DEFAULT_ALLOW, SecretEnvPolicy, glob_match
from diagnostics.mcp.selectors import own_variables, secret_policy
from diagnostics.mcp.servers import mcp_grant_set, mcp_server_sync
from diagnostics.models import McpServer
from routing import scopes
from tests.api.conftest import call as api
from tests.api.conftest import role_key
from tests.factories import BackendFactory, McpServerFactory, McpToolFactory, UserFactory, make_role_key
from tests.mcp.conftest import upstream_command
from tests.mcp.test_surfaces import call, text
from tests.support.fake_environment import FakeEnvironment  # noqa: F401  (registers the "fake" environment)

OWN: tuple[str, ...] = ("DATABASE_URL", "SECRET_KEY", "DJANGO_SECRET_KEY", "SLACK_BOT_TOKEN")
OWN += ("SLACK_SIGNING_SECRET", "CELERY_BROKER_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
OWN += ("SKILLGATE_METRICS_TOKEN",)


@pytest.fixture
def listener() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A plain HTTP listener that records every request's headers (what an attacker's URL would see)."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            seen.append(dict(self.headers.items()))
            self.send_response(404)
            self.end_headers()

        do_GET = do_POST = do_DELETE = _any

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/mcp", seen
    server.shutdown()
    server.server_close()


@pytest.fixture
def secrets_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OWN:
        monkeypatch.setenv(name, f"value-of-{name.lower()}")
    monkeypatch.setenv("MCP_TEST_TOKEN", "Bearer allowed-token")
    monkeypatch.setenv("CUSTOM_LLM_KEY", "sk-custom-backend-key")


def test_the_policy_allows_the_documented_names_and_refuses_the_service_own(settings) -> None:
    policy = SecretEnvPolicy()
    for name in ("SKILLGATE_GH_TOKEN", "SKILLGATE_UPSTREAM_AUTH", "MCP_TEST_TOKEN", "MCP_GITHUB_PAT"):
        assert policy.problem(name) == "", name
    for name in (*OWN[:-1], "PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "REDIS_URL"):
        assert "Skillgate's own secrets" in policy.problem(name), name
    assert "not on SKILLGATE_MCP_SECRET_ENV_ALLOW" in policy.problem("HOME")
    # Allowed by the operator's glob, still refused: the deny wins.
    wide = SecretEnvPolicy(allow=("*",), own=frozenset({"SKILLGATE_METRICS_TOKEN"}))
    assert wide.problem("GITHUB_TOKEN") == ""
    assert all(wide.problem(name) for name in OWN), OWN
    assert glob_match("A*B*C", "AXBYC") and not glob_match("A*B*C", "AXCYB") and not glob_match("AB*", "A")
    assert tuple(settings.MCP_SECRET_ENV_ALLOW) == DEFAULT_ALLOW


@pytest.mark.django_db
def test_the_service_own_variables_are_gathered_from_its_settings_and_backends(settings) -> None:
    BackendFactory.create(name="custom", api_key_env="CUSTOM_LLM_KEY")
    own = own_variables(backends=True)
    assert {"SKILLGATE_METRICS_TOKEN", "SLACK_BOT_TOKEN", "SKILLGATE_MCP_OAUTH_CLIENT_SECRET"} <= own
    assert "CUSTOM_LLM_KEY" in own and "CUSTOM_LLM_KEY" not in own_variables()
    settings.MCP_SECRET_ENV_ALLOW = ["*"]
    assert "Skillgate's own" in secret_policy(backends=True).problem("CUSTOM_LLM_KEY")


@pytest.mark.django_db(transaction=True)
def test_an_mcp_admin_key_cannot_register_or_repoint_a_server_to_read_service_secrets(
    client: Client, listener, secrets_set, settings
) -> None:
    url, seen = listener
    settings.MCP_SECRET_ENV_ALLOW = ["*"]  # even an operator who allows everything
    BackendFactory.create(name="custom", api_key_env="CUSTOM_LLM_KEY")
    admin = role_key("admin", scopes.MCP_ADMIN)
    base = {"name": "exfil", "environment": "fake", "transport": "http", "url": url}
    for variable in (*OWN, "CUSTOM_LLM_KEY"):
        refused = api(client, "POST", "/api/mcp/servers", admin, {**base, "secret_env": {"X-Leak": variable}})
        body = refused.json()
        assert refused.status_code == 400, (variable, body)
        assert body["error"]["code"] == "invalid_field" and variable in body["error"]["message"], body
        assert "secret_env" in body["error"]["message"]
    assert not McpServer.objects.exists()
    settings.MCP_SECRET_ENV_ALLOW = ["MCP_*"]
    off_list = api(client, "POST", "/api/mcp/servers", admin, {**base, "secret_env": {"X-Leak": "HOME"}})
    assert (
        off_list.status_code == 400
        and "SKILLGATE_MCP_SECRET_ENV_ALLOW" in off_list.json()["error"]["message"]
    )
    ok = api(
        client, "POST", "/api/mcp/servers", admin, {**base, "secret_env": {"Authorization": "MCP_TEST_TOKEN"}}
    )
    assert ok.status_code in (200, 201), ok.json()
    moved = api(
        client, "POST", "/api/mcp/servers/exfil/update", admin, {"secret_env": {"X-Leak": "DATABASE_URL"}}
    )
    assert moved.status_code == 400 and "DATABASE_URL" in moved.json()["error"]["message"]
    assert McpServer.objects.get().secret_env == {"Authorization": "MCP_TEST_TOKEN"}
    assert seen == []  # nothing ever connected


@pytest.mark.django_db
def test_the_dashboard_form_says_why_next_to_the_field(client: Client, settings) -> None:
    client.force_login(UserFactory.create(username="the-admin", roles=["admin"]))
    settings.MCP_API_STDIO_PROGRAMS = [sys.executable]
    data = {
        "name": "exfil",
        "environment": "fake",
        "transport": "stdio",
        "command": f"{sys.executable} -m tests.support.mcp_upstream",
        "secret_env": "UPSTREAM_LOG=DATABASE_URL",
        "allow_list": "",
        "timeout_s": "8",
        "max_output_bytes": "64000",
    }
    response = client.post("/mcp-servers/new/", data)
    page = response.content.decode()
    assert response.status_code == 400 and 'data-field-errors="secret_env"' in page
    assert "DATABASE_URL is one of Skillgate" in page
    assert not McpServer.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_row_that_names_a_denied_variable_anyway_sends_nothing(
    gateway_url, listener, secrets_set, tmp_path, monkeypatch
) -> None:
    """Written before the rule (or around it): every connect refuses it before a byte is sent."""
    url, seen = listener
    server = McpServerFactory.create(
        name="old",
        environment="fake",
        transport="http",
        command=[],
        url=url,
        secret_env={"Authorization": "MCP_TEST_TOKEN", "X-Leak": "DATABASE_URL"},
    )
    report = mcp_server_sync(server=server)
    assert "refused its credentials" in report.error and "DATABASE_URL" in report.error
    assert "value-of-database_url" not in report.error
    McpToolFactory.create(server=server, name="lookup")
    agent = make_role_key("agent", "operator", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    answer = call(gateway_url + "/mcp/servers/old", agent.raw, "lookup", {})
    assert answer.is_error and "value-of" not in text(answer)
    assert seen == []

    log = tmp_path / "touch.log"
    monkeypatch.setenv("MCP_TEST_UPSTREAM_LOG", str(log))
    child = McpServerFactory.create(
        name="child",
        environment="fake",
        command=upstream_command(),
        secret_env={"UPSTREAM_LOG": "MCP_TEST_UPSTREAM_LOG", "LEAK": "SLACK_BOT_TOKEN"},
    )
    report = mcp_server_sync(server=child)
    assert "refused its credentials" in report.error and "SLACK_BOT_TOKEN" in report.error
    assert not log.exists()
