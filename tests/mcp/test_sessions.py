"""MCP sessions on the running server (uvicorn on a free port), by raw HTTP as the Streamable HTTP
transport of the MCP specification describes them: ``initialize`` issues ``Mcp-Session-Id``, later
requests need it, ``DELETE`` ends it, an unknown or another key's id is a 404, a key holds a bounded
number, and the SDK's own client works throughout (``GET``'s bounded stream: test_streams.py)."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from routing import scopes
from tests.factories import make_key, make_role_key
from tests.mcp.test_surfaces import call

pytestmark = pytest.mark.django_db(transaction=True)

ACCEPT = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def post(url: str, key: str, body: dict[str, Any], session: str | None = None) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {key}", "Accept": ACCEPT, "MCP-Protocol-Version": "2025-06-18"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return httpx2.post(url, json=body, headers=headers, timeout=30)


def open_session(url: str, key: str) -> str:
    response = post(url, key, INITIALIZE)
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert post(url, key, initialized, session).status_code == 202
    return session


def test_a_session_is_issued_on_initialize_required_after_and_ended_by_delete(gateway_url):
    url = gateway_url + "/mcp"
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    session = open_session(url, key.raw)
    assert len(session) >= 16 and session.isascii()

    listed = post(url, key.raw, LIST, session)
    assert listed.status_code == 200 and "list_incidents" in listed.text
    assert post(url, key.raw, LIST).status_code == 400  # no session id after initialize
    assert post(url, key.raw, LIST, "f" * 32).status_code == 404  # an unknown session

    other = make_key(name="other", scopes=[scopes.INCIDENTS_READ])
    assert post(url, other.raw, LIST, session).status_code == 404  # another key's session: not found
    ended = httpx2.delete(url, headers={"Authorization": f"Bearer {key.raw}", "Mcp-Session-Id": session})
    assert ended.status_code == 200
    assert post(url, key.raw, LIST, session).status_code == 404  # ended
    gone = httpx2.delete(url, headers={"Authorization": f"Bearer {key.raw}", "Mcp-Session-Id": session})
    assert gone.status_code == 404
    no_id = httpx2.delete(url, headers={"Authorization": f"Bearer {key.raw}"})
    assert no_id.status_code == 400


def test_a_key_holds_a_bounded_number_of_sessions_and_ending_one_frees_a_place(gateway_url, settings):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "MCP_EDGE": {**settings.SKILLGATE["MCP_EDGE"], "SESSIONS_PER_KEY": 2},
    }
    url = gateway_url + "/mcp"
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    first, _second = open_session(url, key.raw), open_session(url, key.raw)
    refused = post(url, key.raw, INITIALIZE)
    assert refused.status_code == 429 and "SKILLGATE_MCP_SESSIONS_PER_KEY" in refused.text
    other = make_key(name="other", scopes=[scopes.INCIDENTS_READ])
    assert post(url, other.raw, INITIALIZE).status_code == 200  # the bound is per key
    httpx2.delete(url, headers={"Authorization": f"Bearer {key.raw}", "Mcp-Session-Id": first})
    assert post(url, key.raw, INITIALIZE).status_code == 200


def test_the_sdk_client_works_with_sessions_and_a_gateway_grant_is_checked_on_every_request(gateway_url):
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    assert {"list_incidents", "get_incident"} <= {t.name for t in call(gateway_url + "/mcp", key.raw, None)}
    result = call(gateway_url + "/mcp", key.raw, "list_incidents", {})
    assert not result.is_error
    nogrant = make_key(name="nogrant", scopes=[scopes.MCP_GATEWAY])
    assert post(gateway_url + "/mcp/servers/nothing", nogrant.raw, INITIALIZE).status_code == 404


def test_a_grant_revoked_mid_session_stops_the_next_request(gateway_url):
    from diagnostics.mcp.servers import mcp_grant_set, mcp_server_register
    from diagnostics.models import McpGrant
    from tests.mcp.conftest import upstream_command

    server = mcp_server_register(
        by=None, name="granted", environment="fake", transport="stdio", command=upstream_command()
    )
    agent = make_key(name="agent", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    url = gateway_url + "/mcp/servers/granted"
    session = open_session(url, agent.raw)
    listed = post(url, agent.raw, LIST, session)
    assert listed.status_code == 200 and "skillgate_action_result" in listed.text
    assert post(gateway_url + "/mcp", agent.raw, LIST, session).status_code == 404  # another endpoint's id
    McpGrant.objects.filter(server=server).delete()
    assert post(url, agent.raw, LIST, session).status_code == 404


def test_a_session_opened_in_one_process_works_in_another_and_ends_in_all(gateway_url, second_server):
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    session = open_session(gateway_url + "/mcp", key.raw)
    elsewhere = post(second_server + "/mcp", key.raw, LIST, session)
    assert elsewhere.status_code == 200 and "list_incidents" in elsewhere.text
    other = make_key(name="other", scopes=[scopes.INCIDENTS_READ])
    assert post(second_server + "/mcp", other.raw, LIST, session).status_code == 404
    assert post(second_server + "/mcp", key.raw, LIST, "e" * 32).status_code == 404
    ended = httpx2.delete(
        second_server + "/mcp", headers={"Authorization": f"Bearer {key.raw}", "Mcp-Session-Id": session}
    )
    assert ended.status_code == 200
    assert post(gateway_url + "/mcp", key.raw, LIST, session).status_code == 404  # ended everywhere
    assert post(second_server + "/mcp", key.raw, LIST, session).status_code == 404
