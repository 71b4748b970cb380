"""Issue 40 follow-ups: an operator's sync of a slow upstream stalls no one's /v1 call; deleting a server
ends its pending approvals; an SSE upstream registers and connects."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx2
import pytest
from django.test import Client

from app.web.forms.mcp import McpServerForm
from diagnostics.mcp import transports
from diagnostics.mcp.servers import mcp_server_register
from diagnostics.models import ActionRequest, McpServer
from routing import scopes
from tests.api.conftest import call, role_key
from tests.factories import ActionRequestFactory, McpServerFactory, make_key, make_role_key
from tests.mcp.conftest import connect, upstream_command
from tests.mcp.test_sse_and_passthrough import sse_url  # noqa: F401  (the older HTTP+SSE upstream)
from tests.support.wall import bound

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_slow_upstreams_sync_over_the_api_stalls_no_other_keys_v1_call(
    gateway_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every listing after the first takes 3 s: ``POST /api/mcp/servers/slow/sync`` waits for it on the
    event loop (the writes on the MCP pool); meanwhile other keys' ``GET /v1/models``, each a fresh key (a
    database read at the edge), answer in under a second. A guard, not a reproduction: Django's ASGI
    handler runs each request's sync code on that request's own thread, so the former sync operation did
    not stall /v1 either; the async one also holds no thread and no database connection while it waits."""
    monkeypatch.setenv("MCP_TEST_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("MCP_TEST_DELAY", "3")
    server = mcp_server_register(
        by=None,
        name="slow",
        environment="fake",
        transport="stdio",
        command=upstream_command(),
        secret_env={"UPSTREAM_STATE": "MCP_TEST_STATE", "UPSTREAM_LIST_DELAY_S": "MCP_TEST_DELAY"},
        timeout_s=20,
    )
    connect(server)  # the first listing: fast
    admin = make_role_key("mcp-admin", "admin", scopes=[scopes.MCP_ADMIN])
    keys = [make_key(name=f"reader-{n}") for n in range(30)]
    outcome: dict[str, httpx2.Response] = {}

    def sync() -> None:
        outcome["sync"] = httpx2.post(
            gateway_url + "/api/mcp/servers/slow/sync",
            json={},
            headers={"Authorization": f"Bearer {admin.raw}"},
            timeout=30,
        )

    worker = threading.Thread(target=sync)
    worker.start()
    latencies: list[float] = []
    time.sleep(0.5)
    for key in keys:
        if not worker.is_alive():
            break
        started = time.monotonic()
        response = httpx2.get(
            gateway_url + "/v1/models", headers={"Authorization": f"Bearer {key.raw}"}, timeout=30
        )
        latencies.append(time.monotonic() - started)
        assert response.status_code == 200, response.text
        time.sleep(0.1)
    worker.join(30)
    synced = outcome["sync"]
    assert synced.status_code == 200, synced.text
    body = synced.json()
    assert body["sync"]["error"] == "" and body["server"]["synced_at"] is not None
    assert {t["name"] for t in body["server"]["tools"]} >= {"status", "touch"}
    assert len(latencies) >= 8 and max(latencies) < bound(1.0), latencies
    assert int((tmp_path / "state").read_text()) == 2  # the first connect, the API's sync


def test_deleting_a_server_expires_its_pending_approvals_and_no_others(client: Client) -> None:
    McpServerFactory.create(name="fs")
    McpServerFactory.create(name="fsx")
    gone = ActionRequestFactory.create(tool="mcp__fs__write_file", args={"path": "/x"})
    approved = ActionRequestFactory.create(tool="mcp__fs__write_file", status=ActionRequest.Status.APPROVED)
    other_server = ActionRequestFactory.create(tool="mcp__fsx__write_file", args={"path": "/x"})
    not_mcp = ActionRequestFactory.create()
    admin = role_key("admin", scopes.MCP_ADMIN)

    deleted = call(client, "POST", "/api/mcp/servers/fs/delete", admin, {"note": "decommissioned"})

    assert deleted.status_code == 200, deleted.content
    gone.refresh_from_db()
    assert gone.status == ActionRequest.Status.EXPIRED and gone.decided_by == admin.key.owner
    assert gone.decided_at is not None and "'fs' was deleted" in gone.decision_note
    statuses = {a.pk: ActionRequest.objects.get(pk=a.pk).status for a in (approved, other_server, not_mcp)}
    assert statuses == {
        approved.pk: ActionRequest.Status.APPROVED,  # decided before: its execution checks the identity
        other_server.pk: ActionRequest.Status.PENDING,
        not_mcp.pk: ActionRequest.Status.PENDING,
    }


def test_an_sse_server_registers_and_connects_with_no_streamable_http_post(
    client: Client,
    sse_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Registered as ``sse``, the client opens the event stream at once: no Streamable HTTP ``POST`` that
    the server would refuse first (what a server registered as ``http`` costs)."""
    posts: list[str] = []

    def no_post(url: str, **kwargs: object) -> object:
        posts.append(url)
        raise AssertionError("a Streamable HTTP POST to an SSE server")

    monkeypatch.setattr(transports, "streamable_http_client", no_post)
    admin = role_key("admin", scopes.MCP_ADMIN)
    body = {"name": "older", "environment": "fake", "transport": "sse", "url": sse_url, "connect": True}

    registered = call(client, "POST", "/api/mcp/servers", admin, body)

    assert registered.status_code == 201, registered.content
    answer = registered.json()
    assert answer["server"]["transport"] == "sse" and answer["sync"]["error"] == ""
    assert {"echo", "wipe"} <= set(answer["sync"]["added"]) and posts == []
    assert McpServer.objects.get(name="older").transport == McpServer.Transport.SSE
    resynced = call(client, "POST", "/api/mcp/servers/older/sync", admin, {})
    assert resynced.status_code == 200 and resynced.json()["sync"]["error"] == "" and posts == []
    # The dashboard's form offers and accepts the same choice.
    data = {**body, "name": "older-2", "timeout_s": 20, "max_output_bytes": 64000}
    form = McpServerForm(data=data)
    assert form.is_valid(), form.errors
    assert form.server_fields()["transport"] == "sse" and form.server_fields()["url"] == sse_url
