"""The bounded server-to-client event stream (``GET`` in a session) on the running server: refused at once
without a session, an event-stream ``Accept`` or its caller's session; bounded in time and per key across
processes; heartbeats; closed when the session ends or the grant goes; and on the gateway a
``tools/list_changed`` when an operator's acceptance changes the tools the key sees, which the SDK's own
client receives on the stream it opens by itself."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import httpx2
import pytest
from django.core.exceptions import ImproperlyConfigured
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from app.mcp import streams
from diagnostics.mcp.servers import mcp_grant_set, mcp_server_accept, mcp_server_register, mcp_server_sync
from diagnostics.models import McpGrant
from routing import scopes
from tests.factories import make_key, make_role_key
from tests.mcp.conftest import upstream_command
from tests.mcp.test_sessions import LIST, open_session, post

pytestmark = pytest.mark.django_db(transaction=True)


def lowered(settings: Any, **values: Any) -> streams.Limits:
    """The stream limits set lower through the MCP edge's settings (as SKILLGATE_MCP_STREAM_* would)."""
    settings.SKILLGATE = {**settings.SKILLGATE, "MCP_EDGE": {**settings.SKILLGATE["MCP_EDGE"], **values}}
    return streams.current()


@pytest.fixture
def fast(settings: Any) -> streams.Limits:
    return lowered(
        settings, STREAM_MAX_S=2.0, STREAM_HEARTBEAT_S=0.25, STREAMS_PER_KEY=1, STREAM_RETRY_MS=100
    )


def _get(url: str, key: str, session: str | None, accept: str = "text/event-stream") -> httpx2.Response:
    headers = {"Authorization": f"Bearer {key}", "Accept": accept}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return httpx2.get(url, headers=headers, timeout=10)


class Reader(threading.Thread):
    """Reads one event stream to its end, with the time each line came."""

    def __init__(self, url: str, key: str, session: str) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.session = url, key, session
        self.status = 0
        self.lines: list[tuple[float, str]] = []
        self.opened = threading.Event()
        self.started = time.monotonic()

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}", "Accept": "text/event-stream"}
        headers["Mcp-Session-Id"] = self.session
        with httpx2.stream("GET", self.url, headers=headers, timeout=30) as response:
            self.status = response.status_code
            self.opened.set()
            for line in response.iter_lines():
                self.lines.append((time.monotonic() - self.started, line))

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def test_a_get_is_refused_at_once_without_its_session_or_an_event_stream_accept(gateway_url, fast):
    url = gateway_url + "/mcp"
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    session = open_session(url, key.raw)
    other = make_key(name="other", scopes=[scopes.INCIDENTS_READ])
    started = time.monotonic()
    assert _get(url, key.raw, None).status_code == 400
    assert _get(url, key.raw, session, accept="application/json").status_code == 406
    assert _get(url, key.raw, "f" * 32).status_code == 404
    assert _get(url, other.raw, session).status_code == 404  # another key's session
    assert _get(url, "sk-wrong", session).status_code == 401
    put = httpx2.put(url, headers={"Authorization": f"Bearer {key.raw}"}, timeout=5)
    assert put.status_code == 405 and put.headers["allow"] == "GET, POST, DELETE"
    assert time.monotonic() - started < 3


def test_a_stream_beats_closes_within_its_bound_and_one_key_holds_one(gateway_url, second_server, fast):
    url = gateway_url + "/mcp"
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    session = open_session(url, key.raw)
    reader = Reader(url, key.raw, session)
    reader.start()
    assert reader.opened.wait(10) and reader.status == 200
    time.sleep(0.3)
    refused = _get(second_server + "/mcp", key.raw, session)  # the bound holds across processes
    assert refused.status_code == 429, refused.text
    started = time.monotonic()
    listed = post(url, key.raw, LIST, session)  # an ordinary call beside the stream
    assert listed.status_code == 200 and time.monotonic() - started < 1
    reader.join(10)
    assert not reader.is_alive()
    assert f"retry: {fast.retry_ms}" in reader.text() and ": ping" in reader.text()
    assert fast.max_s - 0.5 <= reader.lines[-1][0] <= fast.max_s + 1.5, reader.lines[-3:]
    again = Reader(url, key.raw, session)  # the place is free once the stream closed
    again.start()
    assert again.opened.wait(10) and again.status == 200
    again.join(10)


def test_ending_the_session_closes_its_stream(gateway_url, settings):
    lowered(settings, STREAM_MAX_S=30, STREAM_HEARTBEAT_S=0.2, STREAMS_PER_KEY=1)
    url = gateway_url + "/mcp"
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    session = open_session(url, key.raw)
    reader = Reader(url, key.raw, session)
    reader.start()
    assert reader.opened.wait(10)
    headers = {"Authorization": f"Bearer {key.raw}", "Mcp-Session-Id": session}
    assert httpx2.delete(url, headers=headers, timeout=10).status_code == 200
    reader.join(5)
    assert not reader.is_alive()


def _gated(name: str) -> tuple[Any, Any]:
    server = mcp_server_register(
        by=None, name=name, environment="fake", transport="stdio", command=upstream_command()
    )
    report = mcp_server_sync(server=server)  # first sight: the tools wait for an operator
    assert report.error == "", report.error
    agent = make_key(name="agent", scopes=[scopes.MCP_GATEWAY])
    mcp_grant_set(key=agent.key, server=server, tools=[], by=None)
    return server, agent


def test_an_acceptance_sends_list_changed_and_a_revoked_grant_closes_the_stream(gateway_url, settings):
    lowered(settings, STREAM_MAX_S=30, STREAM_HEARTBEAT_S=0.2, STREAMS_PER_KEY=1)
    server, agent = _gated("streamed")
    url = gateway_url + "/mcp/servers/streamed"
    session = open_session(url, agent.raw)
    before = post(url, agent.raw, LIST, session).json()["result"]["tools"]
    reader = Reader(url, agent.raw, session)
    reader.start()
    assert reader.opened.wait(10) and reader.status == 200
    time.sleep(0.5)
    assert "list_changed" not in reader.text()
    mcp_server_accept(server=server, by=None, note="accepted by the test")
    deadline = time.monotonic() + 5
    while "notifications/tools/list_changed" not in reader.text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "notifications/tools/list_changed" in reader.text()
    after = post(url, agent.raw, LIST, session).json()["result"]["tools"]
    assert len(after) > len(before)
    McpGrant.objects.filter(server=server).delete()
    reader.join(5)
    assert not reader.is_alive()  # the grant went: the stream closed


def test_the_sdk_client_receives_list_changed_on_the_stream_it_opens(gateway_url, settings):
    lowered(settings, STREAM_MAX_S=30, STREAM_HEARTBEAT_S=0.2, STREAMS_PER_KEY=2)
    server, agent = _gated("sdkstream")
    url = gateway_url + "/mcp/servers/sdkstream"
    seen: list[str] = []

    async def on_message(message: Any) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if isinstance(method, str):
            seen.append(method)

    async def go() -> tuple[int, int]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {agent.raw}"}, timeout=60) as http,
            Client(
                streamable_http_client(url, http_client=http),  # type: ignore[arg-type]
                mode="legacy",
                cache=None,
                message_handler=on_message,
            ) as client,
        ):
            first = len((await client.list_tools()).tools)
            await anyio.sleep(0.5)  # the client opened its GET stream after initialize
            await anyio.to_thread.run_sync(_accept, server)
            with anyio.fail_after(5):
                while "notifications/tools/list_changed" not in seen:
                    await anyio.sleep(0.1)
            return first, len((await client.list_tools()).tools)

    first, then = anyio.run(go)
    assert then > first, seen


def _accept(server: Any) -> None:
    mcp_server_accept(server=server, by=None, note="accepted by the test")


def test_the_defaults_are_the_documented_ones_and_bad_values_stop_start_up(settings):
    assert streams.current() == streams.Limits(
        max_s=300.0, heartbeat_s=15.0, per_key=2, retry_ms=5000, max_bytes=1_048_576
    )
    original = settings.SKILLGATE
    for name, bad in (
        ("STREAM_MAX_S", 0),
        ("STREAM_HEARTBEAT_S", -1),
        ("STREAMS_PER_KEY", 0),
        ("STREAM_MAX_BYTES", 10),
    ):
        with pytest.raises(ImproperlyConfigured, match=f"SKILLGATE_MCP_{name}"):
            lowered(settings, **{name: bad})
        settings.SKILLGATE = original


def test_a_lowered_byte_bound_closes_the_stream_cleanly_within_it(gateway_url, settings):
    limits = lowered(settings, STREAM_MAX_S=30, STREAM_HEARTBEAT_S=0.01, STREAM_MAX_BYTES=1024)
    url = gateway_url + "/mcp"
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    session = open_session(url, key.raw)
    reader = Reader(url, key.raw, session)
    reader.start()
    assert reader.opened.wait(10) and reader.status == 200
    reader.join(10)
    assert not reader.is_alive()  # closed by its bytes, long before its 30 s
    sent = sum(len(line) + 1 for _, line in reader.lines)
    assert limits.max_bytes - 16 <= sent <= limits.max_bytes, sent
    assert reader.lines[-1][0] < 10 and ": ping" in reader.text()
