"""Issue 40, first sight for resources and prompts: only tools waited for review, so a new server's (or a
re-pointed one's) resources and prompts reached the agent before anyone accepted the server. Now, through
the running gateway with a real upstream that has resources and prompts (tests/mcp/rich_upstream.py over
Streamable HTTP): until the server is accepted, nothing is offered (empty lists) and reads are refused
naming the fix, with nothing read upstream; once accepted over ``/api/``, they pass; pointed elsewhere,
they wait again."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from mcp import Client, MCPError

from bench.support.vllm import free_port
from diagnostics.mcp.lifecycle import mcp_server_update
from diagnostics.mcp.selectors import server_accepted
from diagnostics.mcp.servers import mcp_grant_set, mcp_server_register, mcp_server_sync
from diagnostics.models import McpCall, McpServer
from routing import scopes
from tests.api.conftest import role_key
from tests.factories import make_key
from tests.mcp.conftest import serve
from tests.mcp.page_forms import accept_form
from tests.mcp.test_sse_and_passthrough import session

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[str]:
    """The rich upstream over Streamable HTTP: its base URL (``http://127.0.0.1:<port>``)."""
    port = free_port()
    command = [sys.executable, "-m", "tests.mcp.rich_upstream", "http", str(port)]
    yield from serve(command, {"UPSTREAM_LOG": str(tmp_path / "rich.log")}, port)


async def _everything(client: Client) -> dict[str, Any]:
    """What an agent asks of the server's resources and prompts: the three lists, and a read and a prompt
    (each its content, or the refusal's message)."""
    seen: dict[str, Any] = {
        "resources": [r.name for r in (await client.list_resources()).resources],
        "templates": (await client.list_resource_templates()).resource_templates,
        "prompts": [p.name for p in (await client.list_prompts()).prompts],
    }
    for name, fetch in (
        ("read", lambda: client.read_resource("notes://runbook")),
        ("prompt", lambda: client.get_prompt("triage", {"service": "api"})),
    ):
        try:
            seen[name] = await fetch()
        except MCPError as exc:
            seen[name] = exc.message
    return seen


def _withheld(seen: dict[str, Any]) -> None:
    assert seen["resources"] == [] and seen["templates"] == [] and seen["prompts"] == [], seen
    for name in ("read", "prompt"):
        assert isinstance(seen[name], str) and "waits for an operator to accept it" in seen[name], seen


def test_resources_and_prompts_wait_until_the_server_is_accepted_and_again_when_re_pointed(
    gateway_url, upstream, tmp_path, client
):
    server = mcp_server_register(
        by=None, name="fresh", environment="fake", transport="http", url=upstream + "/mcp"
    )
    assert mcp_server_sync(server=server).error == ""  # connected: its tools are pending
    agent = make_key(name="agent", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    url = gateway_url + "/mcp/servers/fresh"
    log = tmp_path / "rich.log"

    _withheld(session(url, agent.raw, _everything))
    assert not log.exists() and McpCall.objects.count() == 0  # nothing reached the upstream

    admin = {"HTTP_AUTHORIZATION": f"Bearer {role_key('admin', scopes.MCP_ADMIN).raw}"}
    shown = client.get("/api/mcp/servers/fresh", **admin).json()["server"]["fingerprint"]
    body = {"fingerprint": shown}
    accepted = client.post("/api/mcp/servers/fresh/accept", body, content_type="application/json", **admin)
    assert accepted.status_code == 200, accepted.content
    seen = session(url, agent.raw, _everything)
    assert set(seen["resources"]) == {"runbook", "big"} and seen["prompts"] == ["triage"], seen
    assert "Step 1" in seen["read"].contents[0].text
    assert "logs of api" in seen["prompt"].messages[0].content.text
    assert log.read_text().splitlines() == ["read notes://runbook", "prompt triage api"]

    # Pointed elsewhere (another spelling of the address is another endpoint): a server never seen.
    moved = client.post(
        "/api/mcp/servers/fresh/update",
        {"url": upstream.replace("127.0.0.1", "localhost") + "/mcp"},
        content_type="application/json",
        **admin,
    )
    assert moved.status_code == 200, moved.content
    _withheld(session(url, agent.raw, _everything))  # not yet connected
    assert mcp_server_sync(server=McpServer.objects.get(pk=server.pk)).error == ""
    _withheld(session(url, agent.raw, _everything))  # connected again: pending until accepted
    assert len(log.read_text().splitlines()) == 2  # nothing more was read upstream


def test_a_server_with_no_tools_is_accepted_on_the_mcp_page_and_pending_again_when_moved(client, operator):
    """A server that lists no tools has none to accept, so the page offers to accept the server itself;
    once accepted its resources and prompts may pass, and pointed elsewhere it waits again."""
    server = mcp_server_register(
        by=None, name="bare", environment="fake", transport="http", url="http://127.0.0.1:9/mcp"
    )
    McpServer.objects.filter(pk=server.pk).update(synced_at=timezone.now())  # connected: no tools listed
    client.force_login(operator)
    assert not server_accepted(server)
    page = client.get("/mcp-servers/").content.decode()
    assert "Not accepted at this endpoint yet" in page
    posted = client.post("/mcp-servers/", {"server": "bare", **accept_form(page, "bare")})
    assert posted.status_code in (200, 302), posted.content[:300]
    assert server_accepted(server) and "Not accepted" not in client.get("/mcp-servers/").content.decode()
    mcp_server_update(server=server, by=operator, url="http://localhost:9/mcp")
    McpServer.objects.filter(pk=server.pk).update(synced_at=timezone.now())
    assert not server_accepted(server)
