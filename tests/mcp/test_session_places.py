"""The per-key bound on open MCP sessions is global: each session holds one of its key's numbered places
in the shared store (Django's cache, Redis between processes), claimed atomically, so two server
processes together grant no more than ``SKILLGATE_MCP_SESSIONS_PER_KEY``."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest

from routing import scopes
from tests.factories import make_key, make_role_key
from tests.mcp.test_sessions import INITIALIZE, open_session, post
from tests.support.gateway_process import gateway_process

pytestmark = pytest.mark.django_db(transaction=True)

REDIS = "redis://127.0.0.1:6379/1"


def _bounded(settings, limit: int) -> None:
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "MCP_EDGE": {**settings.SKILLGATE["MCP_EDGE"], "SESSIONS_PER_KEY": limit},
    }


def _end(url: str, key: str, session: str) -> int:
    headers = {"Authorization": f"Bearer {key}", "Mcp-Session-Id": session}
    return httpx2.delete(url, headers=headers, timeout=30).status_code


def test_two_servers_share_one_bound_and_an_end_in_either_frees_a_place(gateway_url, second_server, settings):
    _bounded(settings, 2)
    one, two = gateway_url + "/mcp", second_server + "/mcp"
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    first = open_session(one, key.raw)
    open_session(two, key.raw)  # counted per process, each server would still have a place
    for url in (one, two):
        refused = post(url, key.raw, INITIALIZE)
        assert refused.status_code == 429 and "SKILLGATE_MCP_SESSIONS_PER_KEY" in refused.text
    other = make_key(name="other", scopes=[scopes.INCIDENTS_READ])
    assert post(two, other.raw, INITIALIZE).status_code == 200  # the bound is per key
    assert _end(two, key.raw, first) == 200  # ended through the other server
    assert post(two, key.raw, INITIALIZE).status_code == 200
    assert post(one, key.raw, INITIALIZE).status_code == 429


def test_concurrent_initializes_on_two_servers_get_exactly_the_bound(gateway_url, second_server, settings):
    _bounded(settings, 3)
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    urls = [gateway_url + "/mcp", second_server + "/mcp"] * 6
    with ThreadPoolExecutor(max_workers=12) as pool:
        statuses = list(pool.map(lambda url: post(url, key.raw, INITIALIZE).status_code, urls))
    assert sorted(statuses) == [200] * 3 + [429] * 9, statuses


def test_a_refused_initialize_holds_no_place(gateway_url, settings):
    _bounded(settings, 1)
    url = gateway_url + "/mcp"
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    headers = {
        "Authorization": f"Bearer {key.raw}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    for body in (b"{not json", b'{"jsonrpc": "2.0", "id": 0, "method": "tools/list"}'):
        bad = httpx2.post(url, content=body, headers=headers, timeout=30)
        assert bad.status_code == 400, bad.text
        stray = bad.headers.get("mcp-session-id")  # the SDK names one even here: Skillgate never opened it
        if stray is not None:
            listed = post(url, key.raw, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, stray)
            assert listed.status_code == 404
    open_session(url, key.raw)  # the failed initialize's place was given back


@pytest.mark.slow
def test_two_server_processes_share_the_bound_through_redis(tmp_path: Path):
    env = {
        "CACHE_URL": REDIS,
        "CACHE_KEY_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
        "SKILLGATE_MCP_SESSIONS_PER_KEY": "2",
    }
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    with (
        gateway_process("mcp-places-a", tmp_path / "a", env) as first,
        gateway_process("mcp-places-b", tmp_path / "b", env) as second,
    ):
        one, two = first.url + "/mcp", second.url + "/mcp"
        held = open_session(one, key.raw)
        open_session(two, key.raw)
        assert post(one, key.raw, INITIALIZE).status_code == 429
        assert post(two, key.raw, INITIALIZE).status_code == 429
        assert _end(two, key.raw, held) == 200
        assert post(one, key.raw, INITIALIZE).status_code == 200
