"""An MCP session's messages are bounded like /v1 bodies (issue 37, round three's probes).

A caller with an ordinary key opens sessions on ``/mcp`` and sends JSON-RPC messages it controls:
megabytes of deep or wide structure in a tool's arguments, in ``initialize``'s params, or in a
notification (which the SDK answers 202 before it even looks at it), and many sessions at once. Each
such message must be refused before anything walks it, with no tool run and nothing reaching a
listener, while a concurrent ``GET /v1/models`` keeps answering within a second.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from app.mcp import limits
from routing import scopes
from tests.factories import make_key, make_role_key
from tests.support.liveness import models_keep_answering
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ACCEPT = "application/json, text/event-stream"
VERSION = "2025-06-18"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
NEAR_LIMIT = 3_900_000  # under SKILLGATE_MAX_BODY_BYTES (4 MiB)


def post(url: str, key: str, body: bytes, session: str | None = None) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": ACCEPT,
        "MCP-Protocol-Version": VERSION,
        "Content-Type": "application/json",
    }
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return httpx.post(url, content=body, headers=headers, timeout=60)


def open_session(url: str, key: str) -> str:
    response = post(url, key, json.dumps(INITIALIZE).encode())
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    done = post(url, key, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}', session)
    assert done.status_code == 202
    return session


def wide(size: int) -> bytes:
    return b"[" + b",".join([b"[]"] * (size // 3)) + b"]"


def deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def wide_objects(size: int) -> bytes:
    return b"[" + b",".join([b'{"a":1}'] * (size // 8)) + b"]"


SHAPES = {
    "wide arrays": lambda: wide(NEAR_LIMIT),
    "wide objects": lambda: wide_objects(NEAR_LIMIT),
    "deep arrays": lambda: deep(NEAR_LIMIT // 2),
    "deep 190": lambda: b'{"x":' * 190 + b"1" + b"}" * 190,
}


def call_body(value: bytes) -> bytes:
    return (
        b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "list_incidents", '
        b'"arguments": {"filler": ' + value + b"}}}"
    )


def notification_body(value: bytes) -> bytes:
    return b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"junk": ' + value + b"}}"


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("where", ["tools/call", "notification", "initialize", "gateway"])
def test_a_huge_or_deep_message_is_refused_before_anything_walks_it(
    gateway_url, backends, api_key, stub, shape, where
):
    url = gateway_url + "/mcp"
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ, scopes.LLM])
    value = SHAPES[shape]()
    if where == "initialize":
        body = (
            b'{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "'
            + VERSION.encode()
            + b'", "capabilities": {"x": '
            + value
            + b'}, "clientInfo": {"name": "raw", "version": "1"}}}'
        )
        session = None
    elif where == "gateway":  # a registered upstream's gate: refused before the grant is even looked up
        url = gateway_url + "/mcp/servers/files"
        body, session = call_body(value), None
    else:
        session = open_session(url, key.raw)
        body = call_body(value) if where == "tools/call" else notification_body(value)
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: post(url, key.raw, body, session), range(3)))
    for answer in answers:
        assert answer.status_code == 400, (answer.status_code, answer.text[:300])
        error = answer.json()["error"]
        assert error["code"] == -32600 and "SKILLGATE_MAX_JSON_" in error["message"], error
    assert not stub.requests  # nothing reached a listener


def test_a_message_just_under_the_bounds_is_served_while_others_are_answered(gateway_url, backends, api_key):
    """The bound is what keeps the SDK's parse and the tool's schema check cheap: a tool call with
    arguments of 99,000 elements (just under SKILLGATE_MAX_JSON_ELEMENTS) is answered (the schema
    refuses the extra field) while GET /v1/models keeps answering within a second."""
    url = gateway_url + "/mcp"
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ, scopes.LLM])
    session = open_session(url, key.raw)
    body = call_body(b"[" + b",".join([b"[]"] * 49_400) + b"]")  # 98,800 elements and the envelope
    with models_keep_answering(gateway_url, api_key.raw):
        started = time.monotonic()
        with ThreadPoolExecutor(3) as pool:
            bodies = [body.replace(b'"id": 7', b'"id": %d' % i) for i in range(3)]  # one id, one request
            answers = list(pool.map(lambda one: post(url, key.raw, one, session), bodies))
        took = time.monotonic() - started
    for answer in answers:
        assert answer.status_code == 200 and "Invalid arguments" in answer.text, answer.text[:300]
    assert took < 10, took


def test_many_sessions_of_one_key_are_bounded(gateway_url, backends, api_key, settings):
    settings.SKILLGATE = {**settings.SKILLGATE, "MCP_EDGE": {"SESSIONS_PER_KEY": 4}}
    url = gateway_url + "/mcp"
    key = make_key(name="many", scopes=[scopes.LLM])
    statuses: list[int] = []
    lock = threading.Lock()

    def one(_: Any) -> None:
        status = post(url, key.raw, json.dumps(INITIALIZE).encode()).status_code
        with lock:
            statuses.append(status)

    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(40)))
    assert statuses.count(200) == 4 and statuses.count(429) == 36, sorted(statuses)


def test_a_callers_requests_in_flight_are_bounded_and_end_with_their_client(
    gateway_url, backends, api_key, settings
):
    """A request the server is still answering holds its body and its handler: ``ask`` waits for a
    diagnosis (no worker here, so for all of ``wait_s``), as a request left waiting by a duplicate
    JSON-RPC id in its session would for the session's life. A caller's requests in flight are bounded
    (a 429 past the bound, other keys unaffected), and one ends as soon as its client goes away."""
    url = gateway_url + "/mcp"
    key = make_role_key("asker", "operator", scopes=[scopes.INCIDENTS_WRITE, scopes.INCIDENTS_READ])
    principal = f"key:{key.key.pk}:{key.key.prefix}"
    session = open_session(url, key.raw)
    arguments = {"question": "why is the api failing?", "environment": "fake", "wait_s": 30}
    ask = json.dumps(
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "ask", "arguments": arguments}}
    ).encode()
    outcome: list[object] = []

    def asking() -> None:
        try:
            outcome.append(post_with_timeout(url, key.raw, ask, session, 3).status_code)
        except httpx.ReadTimeout:
            outcome.append("gave up")

    waiting = threading.Thread(target=asking)
    started = time.monotonic()
    waiting.start()
    wait_until(lambda: limits.in_flight(principal) == (1, len(ask)), timeout=5, what="the ask in flight")
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "MCP_EDGE": {**settings.SKILLGATE["MCP_EDGE"], "MAX_IN_FLIGHT": 1},
    }
    listing = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}).encode()
    refused = post(url, key.raw, listing, session)
    assert refused.status_code == 429, refused.text
    assert "being answered" in refused.json()["error"]["message"]
    other = make_key(name="other", scopes=[scopes.LLM])
    assert post(url, other.raw, json.dumps(INITIALIZE).encode()).status_code == 200  # another caller: served
    waiting.join(10)
    assert outcome == ["gave up"]
    wait_until(
        lambda: limits.in_flight(principal) == (0, 0), timeout=5, what="the ask to end with its client"
    )
    assert time.monotonic() - started < 10  # long before its 30 s wait was over


def post_with_timeout(url: str, key: str, body: bytes, session: str, timeout: float) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": ACCEPT,
        "MCP-Protocol-Version": VERSION,
        "Content-Type": "application/json",
        "Mcp-Session-Id": session,
    }
    return httpx.post(url, content=body, headers=headers, timeout=timeout)
