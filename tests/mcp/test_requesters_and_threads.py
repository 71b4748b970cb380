"""Issue 40: every write records its requester and needs its surface's scope and grant; another key's
request reads as absent; a slow upstream re-listed at call time stalls no one else's /v1 call."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx2
import pytest

from diagnostics import services
from diagnostics.mcp.servers import mcp_grant_set
from diagnostics.models import ActionRequest, McpCall
from routing import scopes
from tests.factories import make_key, make_role_key
from tests.mcp.conftest import connect, slow_server
from tests.mcp.test_surfaces import call, text
from tests.support.wall import bound

pytestmark = pytest.mark.django_db(transaction=True)

ALL = list(scopes.ALL)


def test_propose_action_records_who_asked_needs_a_grant_and_get_action_is_the_askers(
    gateway_url, hostile, enqueued
):
    connect(hostile)
    rw = [scopes.INCIDENTS_WRITE, scopes.INCIDENTS_READ]
    both = make_role_key("both", "operator", "approver", scopes=rw)
    opener = make_role_key("opener", "operator", scopes=ALL)
    mcp = gateway_url + "/mcp"
    opened = call(mcp, opener.raw, "open_incident", {"text": "the api is down", "environment": "fake"})
    incident_id = json.loads(text(opened))["incident"]["id"]
    proposal = {"incident_id": incident_id, "tool": "mcp__upstream__touch", "args": {"line": "x"}}
    # An MCP write needs the gateway's scope and a grant, as through the gateway itself.
    refused = call(mcp, both.raw, "propose_action", proposal)
    assert refused.is_error and "missing_scope" in text(refused) and "mcp:gateway" in text(refused)
    both.key.scopes = [*both.key.scopes, scopes.MCP_GATEWAY]
    both.key.save()
    refused = call(mcp, both.raw, "propose_action", proposal)
    assert refused.is_error and "no_grant" in text(refused)
    mcp_grant_set(key=both.key, server=hostile, tools=["touch"], by=None)
    proposed = call(mcp, both.raw, "propose_action", proposal)
    assert not proposed.is_error, text(proposed)
    action = ActionRequest.objects.get()
    assert action.requested_by == both.key.owner  # the proposer, not the incident's opener
    # The proposer holds the approver role too, and still cannot approve their own write.
    with pytest.raises(services.ServiceError, match="requested this action"):
        services.action_request_approve(action_request_id=action.pk, user=both.key.owner)

    # get_action: the asker and approvers read it; another role's read key finds nothing.
    mine = json.loads(text(call(mcp, both.raw, "get_action", {"action_id": action.pk})))
    assert mine["action"]["args"] == {"line": "x"}
    reader = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    theirs = call(mcp, reader.raw, "get_action", {"action_id": action.pk})
    assert theirs.is_error and "No action" in text(theirs)
    shown = json.loads(text(call(mcp, reader.raw, "get_incident", {"incident_id": incident_id})))
    actions = shown["incident"]["actions"]
    assert "args" not in json.dumps(actions) and actions[0]["hidden"]


def test_a_slow_upstream_relisted_at_call_time_stalls_no_other_keys_chat_call(
    gateway_url, backends, tmp_path, monkeypatch
):
    """The tool changes on every listing and every listing after the first takes 3 s: the gateway's call
    lists (3 s, changed: not called), then re-lists the server (3 s more). Meanwhile other keys' chat
    calls, each a fresh key (a database read at the /v1 edge), answer in under a second."""
    server = slow_server(tmp_path, monkeypatch, "slow", flip=True)
    agent = make_key(name="agent", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    keys = [make_key(name=f"chat-{n}") for n in range(40)]
    outcome: dict[str, object] = {}

    def gateway_call() -> None:
        outcome["result"] = call(gateway_url + "/mcp/servers/slow", agent.raw, "status", {})

    worker = threading.Thread(target=gateway_call)
    worker.start()
    latencies: list[float] = []
    time.sleep(0.5)
    for key in keys:
        if not worker.is_alive():
            break
        started = time.monotonic()
        response = httpx2.post(
            gateway_url + "/v1/chat/completions",
            json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {key.raw}"},
            timeout=30,
        )
        latencies.append(time.monotonic() - started)
        assert response.status_code == 200, response.text
        time.sleep(0.2)
    worker.join(30)
    result = outcome["result"]
    assert result.is_error and "changed" in text(result)  # type: ignore[attr-defined]
    assert len(latencies) >= 8 and max(latencies) < bound(1.0), latencies
    assert int(Path(tmp_path / "state").read_text()) == 3  # first connect, the call's check, the re-list
    assert McpCall.objects.get().status == "changed"
