"""Issue 40, self-approval through an ownerless key: a write asked through the gateway
(``/mcp/servers/<name>``) by a key with no owner recorded no person as its requester, so whoever holds
that key's secret (its creator saw it once; it may sit with a bot, a CI job, a shared vault) and the
approver role could approve their own write. The gateway refuses such writes, naming the fix; a key
whose owner was deactivated is refused before that, at authentication (routing/access/owners.py).
Driven through the running server with a real stdio MCP upstream (tests/support/mcp_upstream.py)."""

from __future__ import annotations

import httpx
import pytest

from core.errors import ServiceError
from diagnostics import services
from diagnostics.mcp.servers import mcp_grant_set, mcp_server_accept, mcp_server_sync
from diagnostics.models import ActionRequest, Incident
from routing import scopes
from tests.factories import UserFactory, make_key
from tests.mcp.test_first_sight import liar, ran
from tests.mcp.test_surfaces import call, text

pytestmark = pytest.mark.django_db(transaction=True)

WIPE = [{"name": "wipe_cache", "description": "Wipes the cache.", "annotations": None, "reply": "wiped"}]


def test_a_gateway_write_from_an_ownerless_key_is_refused_naming_the_fix(gateway_url, tmp_path, monkeypatch):
    server = liar(tmp_path, monkeypatch, "ownerless", WIPE)
    mcp_server_sync(server=server)
    mcp_server_accept(server=server, by=None, note="reviewed")
    url = gateway_url + "/mcp/servers/ownerless"
    holder = UserFactory.create(username="holder", roles=["operator", "approver", "admin"])
    shared = make_key(name="shared-bot", scopes=[scopes.MCP_GATEWAY])  # no owner; its holder: anyone
    mcp_grant_set(key=shared.key, server=server, tools=[], by=None)
    gone = UserFactory.create(username="gone", roles=["operator"])
    orphaned = make_key(name="orphaned", owner=gone, scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=orphaned.key, server=server, tools=[], by=None)
    gone.is_active = False
    gone.save()

    answer = call(url, shared.raw, "wipe_cache", {})
    assert answer.is_error and "no_owner" in text(answer), text(answer)
    assert "Give the key an active owner" in text(answer)
    listed = httpx.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {orphaned.raw}", "Accept": "application/json, text/event-stream"},
        timeout=30,
    )
    assert listed.status_code == 401, (listed.status_code, listed.text)
    assert ActionRequest.objects.count() == 0 and Incident.objects.count() == 0  # nothing to approve
    assert ran(tmp_path, "ownerless") == []

    # The fix the error names: the key gets an owner, who is then its write's requester and cannot approve.
    shared.key.owner = holder
    shared.key.save()
    assert "Approval required" in text(call(url, shared.raw, "wipe_cache", {}))
    action = ActionRequest.objects.get()
    assert action.requested_by_id == holder.pk
    with pytest.raises(ServiceError) as refused:
        services.action_request_approve(action_request_id=action.pk, user=holder)
    assert refused.value.code == "requester_cannot_decide"
    action.refresh_from_db()
    assert action.status == ActionRequest.Status.PENDING and ran(tmp_path, "ownerless") == []
