"""A caller's MCP requests in flight are bounded by settings (issue 37, round three; app/mcp/limits.py).

``SKILLGATE_MCP_MAX_IN_FLIGHT`` POSTs and ``SKILLGATE_MCP_MAX_IN_FLIGHT_BYTES`` of their bodies per caller
and process (app/conf.py ``McpEdge``): with a small value, the N+1th request of one caller is refused with
a 429 carrying MCP's JSON-RPC error (``code`` -32600, ``id`` null, the setting named), another caller is
served, and the place comes back when a held request's client goes away. A value that is not a positive
integer stops start-up with a message naming the variable.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured

from app import conf
from app.conf import McpEdge
from app.mcp import limits
from core.conf import from_env
from routing import scopes
from tests.factories import make_key, make_role_key
from tests.security.test_mcp_session_bytes import INITIALIZE, open_session, post, post_with_timeout
from tests.support.liveness import models_keep_answering
from tests.support.wait import wait_until

LISTING = json.dumps({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}).encode()


def edge(settings, **values: int) -> None:
    settings.SKILLGATE = {**settings.SKILLGATE, "MCP_EDGE": {**settings.SKILLGATE["MCP_EDGE"], **values}}


def ask(request_id: int) -> bytes:
    """``ask`` waits for a diagnosis (no worker here): it stays in flight for all of ``wait_s``."""
    arguments = {"question": "why is the api failing?", "environment": "fake", "wait_s": 30}
    call = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call"}
    return json.dumps({**call, "params": {"name": "ask", "arguments": arguments}}).encode()


def hold(
    url: str, key: str, session: str, bodies: list[bytes]
) -> tuple[list[threading.Thread], list[object]]:
    """Sends each body from its own thread; each client gives up after 4 s (the server stops it then)."""
    outcome: list[object] = []

    def one(body: bytes) -> None:
        try:
            outcome.append(post_with_timeout(url, key, body, session, 4).status_code)
        except httpx.ReadTimeout:
            outcome.append("gave up")

    threads = [threading.Thread(target=one, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    return threads, outcome


def refusal(response: httpx.Response) -> str:
    """The message of a 429 in MCP's JSON-RPC error convention (asserted)."""
    assert response.status_code == 429, (response.status_code, response.text[:300])
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None, body
    assert body["error"]["code"] == limits.INVALID_REQUEST == -32600, body
    return str(body["error"]["message"])


@pytest.mark.django_db(transaction=True)
def test_the_n_plus_first_request_of_a_caller_is_refused_at_a_small_setting(
    gateway_url, backends, api_key, settings
):
    held = 3
    edge(settings, MAX_IN_FLIGHT=held)
    url = gateway_url + "/mcp"
    key = make_role_key("asker", "operator", scopes=[scopes.INCIDENTS_WRITE, scopes.INCIDENTS_READ])
    principal = f"key:{key.key.pk}:{key.key.prefix}"
    session = open_session(url, key.raw)
    bodies = [ask(10 + i) for i in range(held)]
    with models_keep_answering(gateway_url, api_key.raw):
        threads, outcome = hold(url, key.raw, session, bodies)
        size = sum(len(body) for body in bodies)
        wait_until(lambda: limits.in_flight(principal) == (held, size), timeout=5, what="N asks in flight")
        message = refusal(post(url, key.raw, LISTING, session))
        assert "SKILLGATE_MCP_MAX_IN_FLIGHT" in message and f"{held} MCP requests" in message, message
        other = make_key(name="other", scopes=[scopes.LLM])
        assert post(url, other.raw, json.dumps(INITIALIZE).encode()).status_code == 200  # another caller
        for thread in threads:
            thread.join(10)
    assert outcome == ["gave up"] * held
    wait_until(lambda: limits.in_flight(principal) == (0, 0), timeout=5, what="the places given back")
    again = post(url, key.raw, LISTING, session)
    assert again.status_code == 200 and '"tools"' in again.text, again.text[:300]


@pytest.mark.django_db(transaction=True)
def test_the_bytes_in_flight_of_a_caller_are_bounded_by_their_setting(gateway_url, backends, settings):
    url = gateway_url + "/mcp"
    key = make_role_key("asker", "operator", scopes=[scopes.INCIDENTS_WRITE, scopes.INCIDENTS_READ])
    principal = f"key:{key.key.pk}:{key.key.prefix}"
    session = open_session(url, key.raw)
    first = ask(10)
    edge(settings, MAX_IN_FLIGHT_BYTES=len(first) + len(LISTING) - 1)
    threads, outcome = hold(url, key.raw, session, [first])
    wait_until(lambda: limits.in_flight(principal) == (1, len(first)), timeout=5, what="the ask in flight")
    message = refusal(post(url, key.raw, LISTING, session))
    assert "SKILLGATE_MCP_MAX_IN_FLIGHT_BYTES" in message and f"({len(first) + len(LISTING) - 1})" in message
    threads[0].join(10)
    assert outcome == ["gave up"]
    wait_until(lambda: limits.in_flight(principal) == (0, 0), timeout=5, what="the place given back")
    assert post(url, key.raw, LISTING, session).status_code == 200  # alone, under the bound again


@pytest.mark.parametrize("variable", ["SKILLGATE_MCP_MAX_IN_FLIGHT", "SKILLGATE_MCP_MAX_IN_FLIGHT_BYTES"])
@pytest.mark.parametrize(
    ("given", "says"),
    [("0", "must be at least 1; got 0"), ("-4", "must be at least 1; got -4"), ("8k", "integer")],
)
def test_a_bound_that_is_not_a_positive_integer_stops_start_up(monkeypatch, settings, variable, given, says):
    monkeypatch.setenv(variable, given)
    with pytest.raises(ImproperlyConfigured) as stopped:  # as app/settings/ reads it, then ready() checks it
        settings.SKILLGATE = {**settings.SKILLGATE, "MCP_EDGE": from_env(McpEdge)}
        conf.check()
    assert variable in str(stopped.value) and says in str(stopped.value), str(stopped.value)


def test_the_defaults_are_the_documented_bounds(settings):
    edge_settings = conf.get().mcp_edge
    assert (edge_settings.max_in_flight, edge_settings.max_in_flight_bytes) == (32, 16 * 1024 * 1024)
