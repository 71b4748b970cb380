"""Opaque OAuth access tokens on ``/mcp`` checked by token introspection (RFC 7662) against a real local
HTTP server that speaks it (HTTP Basic client authentication, form-encoded ``token``), on the running
server: inactive, expired, other-audience, other-issuer tokens and a wrong client secret are each a 401
with ``WWW-Authenticate``; a good token acts through its user's key with its grants and the token's
scopes; answers are cached (never past ``exp``); the endpoint is under the URL policy; a slow endpoint
stalls no concurrent ``/v1`` call."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote_plus

import httpx2
import pytest
from django.core.exceptions import ImproperlyConfigured

from app import conf
from app.mcp import introspection
from core.errors import ServiceError
from diagnostics import services
from diagnostics.mcp.servers import mcp_grant_set
from diagnostics.models import ActionRequest
from routing import scopes
from tests.factories import make_key, make_role_key
from tests.mcp.conftest import connect
from tests.mcp.test_sessions import INITIALIZE, LIST, open_session, post
from tests.mcp.test_surfaces import call, text
from tests.support.wall import bound

pytestmark = pytest.mark.django_db(transaction=True)

ISSUER = "https://idp.example.test"
CLIENT_ID = "skillgate gateway"  # a space: encoded before Basic, as RFC 6749 2.3.1 says
SECRET = "s3cret:with/odd&chars"


class Idp:
    """The introspection endpoint's state: what it answers for each token, and what it was asked."""

    def __init__(self, resource: str) -> None:
        self.resource = resource
        self.tokens: dict[str, dict[str, Any]] = {}
        self.delay_s = 0.0
        self.asked: list[str] = []
        self.bad_auth = 0

    def active(self, token: str, **claims: Any) -> str:
        now = int(time.time())
        answer = {"active": True, "iss": ISSUER, "aud": self.resource, "sub": "alice", "exp": now + 300}
        self.tokens[token] = {k: v for k, v in {**answer, **claims}.items() if v is not None}
        return token


@pytest.fixture
def idp_server(gateway_url: str) -> Iterator[tuple[Idp, str]]:
    state = Idp(gateway_url + "/mcp")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            time.sleep(state.delay_s)
            kind, _, encoded = self.headers.get("Authorization", "").partition(" ")
            pair = base64.b64decode(encoded).decode() if kind == "Basic" else ":"
            client, _, secret = pair.partition(":")
            if (unquote_plus(client), unquote_plus(secret)) != (CLIENT_ID, SECRET):
                state.bad_auth += 1
                self._send(401, {"error": "invalid_client"})
                return
            form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            token = form["token"][0]
            state.asked.append(token)
            self._send(200, state.tokens.get(token, {"active": False}))

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}/oauth2/introspect"
    server.shutdown()


def _edge(settings: Any, **values: Any) -> None:
    settings.SKILLGATE = {**settings.SKILLGATE, "MCP_EDGE": {**settings.SKILLGATE["MCP_EDGE"], **values}}


@pytest.fixture
def idp(settings: Any, monkeypatch: pytest.MonkeyPatch, idp_server: tuple[Idp, str]) -> Idp:
    monkeypatch.setenv("TEST_IDP_SECRET", SECRET)
    _edge(
        settings,
        OAUTH_ISSUER=ISSUER,
        OAUTH_RESOURCE=idp_server[0].resource,
        OAUTH_INTROSPECTION_URL=idp_server[1],
        OAUTH_CLIENT_ID=CLIENT_ID,
        OAUTH_CLIENT_SECRET_ENV="TEST_IDP_SECRET",
    )
    introspection.forget()
    return idp_server[0]


def _initialize(url: str, token: str) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    return httpx2.post(url, json=INITIALIZE, headers=headers, timeout=30)


def _alice(*key_scopes: str) -> Any:
    alice = make_role_key("alice", "operator", scopes=[scopes.INCIDENTS_READ])
    return make_key(name="mcp-oauth", owner=alice.key.owner, scopes=list(key_scopes))


def test_a_good_opaque_token_acts_through_its_key_with_its_grants_and_is_cached(gateway_url, idp, hostile):
    connect(hostile)
    key = _alice(scopes.INCIDENTS_READ, scopes.INCIDENTS_WRITE, scopes.MCP_GATEWAY)
    mcp_grant_set(key=key.key, server=hostile, tools=["status"], by=None)
    token = idp.active("opaque-good-1", scope=f"{scopes.INCIDENTS_READ} {scopes.MCP_GATEWAY}")
    assert not call(gateway_url + "/mcp", token, "list_incidents", {}).is_error
    refused = call(gateway_url + "/mcp", token, "open_incident", {"text": "the api is down"})
    assert refused.is_error and "missing_scope" in text(refused)  # the key has it, the token does not
    url = gateway_url + "/mcp/servers/upstream"
    assert {t.name for t in call(url, token, None)} == {"status", "skillgate_action_result"}  # the grant
    assert not call(url, token, "status", {}).is_error
    assert call(url, token, "touch", {}).is_error  # not granted
    assert idp.asked == ["opaque-good-1"]  # every later request was answered from the cache
    bare = idp.active("opaque-no-gateway", scope=scopes.INCIDENTS_READ)
    assert _initialize(url, bare).status_code == 404  # the key has mcp:gateway, the token does not


@pytest.mark.parametrize(
    "problem", ["inactive", "expired", "other_audience", "no_audience", "other_issuer", "unknown", "no_key"]
)
def test_an_opaque_token_the_endpoint_does_not_admit_is_a_401(gateway_url, idp, problem):
    if problem != "no_key":
        _alice(scopes.INCIDENTS_READ)
    now = int(time.time())
    tokens = {
        "inactive": idp.active("t-inactive", active=False),
        "expired": idp.active("t-expired", exp=now - 600),  # the endpoint says active: we check exp
        "other_audience": idp.active("t-aud", aud=["https://elsewhere.example/mcp"]),
        "no_audience": idp.active("t-noaud", aud=None),
        "other_issuer": idp.active("t-iss", iss="https://evil.example"),
        "unknown": "t-never-issued",
        "no_key": idp.active("t-nokey"),
    }
    response = _initialize(gateway_url + "/mcp", tokens[problem])
    assert response.status_code == 401, problem
    challenge = response.headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge and "resource_metadata=" in challenge
    assert idp.asked == [tokens[problem]]


def test_a_wrong_client_secret_is_a_401_and_is_not_cached(gateway_url, idp, monkeypatch):
    _alice(scopes.INCIDENTS_READ)
    token = idp.active("t-good", scope=scopes.INCIDENTS_READ)
    monkeypatch.setenv("TEST_IDP_SECRET", "wrong")
    for _ in range(2):
        response = _initialize(gateway_url + "/mcp", token)
        assert response.status_code == 401 and 'error="invalid_token"' in response.headers["www-authenticate"]
    assert idp.bad_auth == 2 and idp.asked == []  # asked again: a failure of the endpoint is not cached
    monkeypatch.setenv("TEST_IDP_SECRET", SECRET)
    assert _initialize(gateway_url + "/mcp", token).status_code == 200


def test_a_cached_answer_ends_at_the_tokens_exp_and_at_the_bounded_ttl(gateway_url, idp, settings):
    _alice(scopes.INCIDENTS_READ)
    exp = time.time() + 2.5
    soon = idp.active("t-soon", scope=scopes.INCIDENTS_READ, exp=exp)
    assert _initialize(gateway_url + "/mcp", soon).status_code == 200
    assert _initialize(gateway_url + "/mcp", soon).status_code == 200 and idp.asked == ["t-soon"]
    time.sleep(max(0.0, exp - time.time()) + 0.2)
    assert _initialize(gateway_url + "/mcp", soon).status_code == 401  # asked again: now past exp
    assert idp.asked == ["t-soon", "t-soon"]

    _edge(settings, OAUTH_INTROSPECTION_CACHE_S=1)
    revoked = idp.active("t-revoked", scope=scopes.INCIDENTS_READ)
    assert _initialize(gateway_url + "/mcp", revoked).status_code == 200
    idp.tokens["t-revoked"] = {"active": False}  # revoked at the issuer
    assert _initialize(gateway_url + "/mcp", revoked).status_code == 200  # within the cache's second
    time.sleep(1.2)
    assert _initialize(gateway_url + "/mcp", revoked).status_code == 401


def test_the_endpoint_is_under_the_url_policy(gateway_url, idp, settings):
    _alice(scopes.INCIDENTS_READ)
    token = idp.active("t-policy", scope=scopes.INCIDENTS_READ)
    settings.MCP_URL_ALLOW_PRIVATE = False  # loopback refused, as for a registered server
    assert _initialize(gateway_url + "/mcp", token).status_code == 401
    assert idp.asked == []  # nothing reached it
    settings.MCP_URL_ALLOW_PRIVATE = True
    assert _initialize(gateway_url + "/mcp", token).status_code == 200


def test_a_slow_endpoint_stalls_no_concurrent_chat_call_and_times_out(gateway_url, idp, settings, backends):
    _alice(scopes.INCIDENTS_READ)
    _edge(settings, OAUTH_INTROSPECTION_TIMEOUT_S=2)
    idp.delay_s = 4.0
    token = idp.active("t-slow", scope=scopes.INCIDENTS_READ)
    outcome: dict[str, Any] = {}

    def session() -> None:
        started = time.monotonic()
        outcome["status"] = _initialize(gateway_url + "/mcp", token).status_code
        outcome["took"] = time.monotonic() - started

    worker = threading.Thread(target=session)
    worker.start()
    latencies: list[float] = []
    time.sleep(0.3)
    while worker.is_alive() and len(latencies) < 12:
        key = make_key(name=f"chat-{len(latencies)}")
        started = time.monotonic()
        response = httpx2.post(
            gateway_url + "/v1/chat/completions",
            json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {key.raw}"},
            timeout=30,
        )
        latencies.append(time.monotonic() - started)
        assert response.status_code == 200, response.text
        time.sleep(0.1)
    worker.join(30)
    assert outcome["status"] == 401 and 1.9 <= outcome["took"] < 3.5, outcome  # the timeout, not the 4 s
    assert len(latencies) >= 3 and max(latencies) < bound(1.0), latencies


def test_introspection_settings_are_checked_at_start_up(settings, monkeypatch):
    monkeypatch.delenv("TEST_IDP_SECRET", raising=False)
    base = {"OAUTH_ISSUER": ISSUER, "OAUTH_RESOURCE": "https://sg.example/mcp"}
    url = "https://idp.example.test/introspect"
    cases = [
        ({"OAUTH_ISSUER": "", "OAUTH_INTROSPECTION_URL": url}, "SKILLGATE_MCP_OAUTH_ISSUER"),
        ({**base, "OAUTH_INTROSPECTION_URL": url}, "SKILLGATE_MCP_OAUTH_CLIENT_ID"),
        (
            {
                **base,
                "OAUTH_INTROSPECTION_URL": url,
                "OAUTH_CLIENT_ID": "c",
                "OAUTH_CLIENT_SECRET_ENV": "A B",
            },
            "SKILLGATE_MCP_OAUTH_CLIENT_SECRET_ENV",
        ),
        (
            {
                **base,
                "OAUTH_INTROSPECTION_URL": url,
                "OAUTH_CLIENT_ID": "c",
                "OAUTH_CLIENT_SECRET_ENV": "TEST_IDP_SECRET",
            },
            "TEST_IDP_SECRET",
        ),
        ({**base, "OAUTH_INTROSPECTION_URL": "ftp://x", "OAUTH_CLIENT_ID": "c"}, "INTROSPECTION_URL"),
    ]
    for values, named in cases:
        _edge(settings, **values)
        with pytest.raises(ImproperlyConfigured, match=named):
            conf.get()
    monkeypatch.setenv("TEST_IDP_SECRET", "x")
    _edge(settings, **cases[3][0])
    assert conf.get().mcp_edge.oauth_jwks_url == ""  # introspection alone needs no JWKS


def test_an_opaque_token_proposer_cannot_approve_their_own_write_anywhere_nor_share_a_session(
    gateway_url, idp, hostile, tmp_path, client, enqueued
):
    connect(hostile)
    alice = make_role_key("alice", "operator", "approver", scopes=list(scopes.ALL))
    oauth_key = make_key(name="mcp-oauth", owner=alice.key.owner, scopes=list(scopes.ALL))
    mcp_grant_set(key=oauth_key.key, server=hostile, tools=["touch"], by=None)
    token = idp.active("t-alice", scope=f"{scopes.MCP_GATEWAY} {scopes.INCIDENTS_READ}")
    url = gateway_url + "/mcp/servers/upstream"
    asked = call(url, token, "touch", {"line": "x"})
    assert asked.is_error and "Approval required" in text(asked)
    action = ActionRequest.objects.get()
    assert action.requested_by == alice.key.owner  # the token's user, through its key

    # The same person, holding the approver role, on each surface that approves:
    api = client.post(
        f"/api/actions/{action.pk}/approve",
        {},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {alice.raw}",
    )
    assert api.status_code in (400, 403, 409), api.content
    client.force_login(alice.key.owner)
    page = client.post(
        f"/incidents/{action.trajectory.incident_id}/actions/{action.pk}/approve",
        {"confirm": "yes", "plan_hash": action.plan_hash},
    )
    assert page.status_code == 403
    with pytest.raises(ServiceError, match="requested this action"):
        services.action_request_approve(action_request_id=action.pk, user=alice.key.owner)
    action.refresh_from_db()
    assert action.status == "pending" and enqueued == []
    assert not (tmp_path / "touch.log").exists()  # nothing ran upstream

    # A session belongs to the principal that opened it: the same user's key, or another token, gets a 404.
    session = open_session(url, token)
    assert post(url, token, LIST, session).status_code == 200
    assert post(url, oauth_key.raw, LIST, session).status_code == 404
    make_key(
        name="mcp-oauth", owner=make_role_key("bob", "operator", scopes=[]).key.owner, scopes=list(scopes.ALL)
    )
    bob = idp.active("t-bob", sub="bob", scope=scopes.MCP_GATEWAY)
    assert post(url, bob, LIST, session).status_code in (404, 401)
