"""OAuth 2.1 on ``/mcp`` (the resource-server side of the MCP authorization spec), on the running server:
the protected-resource metadata (RFC 9728), ``WWW-Authenticate`` on a 401, access tokens (JWTs signed by
a key of a real JWKS served over HTTP here) validated for signature, issuer, audience and lifetime and
acting through their user's ``mcp-oauth`` key with its scopes narrowed to the token's, API keys unchanged,
and a slow JWKS stalling no concurrent ``/v1`` call."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from routing import scopes
from tests.factories import make_key, make_role_key
from tests.mcp.test_sessions import INITIALIZE, post
from tests.mcp.test_surfaces import call, text
from tests.support.wall import bound

pytestmark = pytest.mark.django_db(transaction=True)

ISSUER = "https://idp.example.test"


class Jwks:
    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.document = json.dumps({"keys": [{**public, "kid": "k1", "alg": "RS256", "use": "sig"}]}).encode()
        self.delay_s = 0.0
        self.fetches = 0

    def token(self, audience: str, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": audience, "sub": "alice", "iat": now, "exp": now + 300, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture
def jwks() -> Iterator[tuple[Jwks, str]]:
    state = Jwks()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.fetches += 1
            time.sleep(state.delay_s)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(state.document)))
            self.end_headers()
            self.wfile.write(state.document)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    server.shutdown()


@pytest.fixture
def oauth_on(settings: Any, gateway_url: str, jwks: tuple[Jwks, str]) -> str:
    resource = gateway_url + "/mcp"
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "MCP_EDGE": {
            **settings.SKILLGATE["MCP_EDGE"],
            "OAUTH_ISSUER": ISSUER,
            "OAUTH_JWKS_URL": jwks[1],
            "OAUTH_RESOURCE": resource,
        },
    }
    from app.mcp import oauth

    oauth._jwks.cache_clear()  # a fresh JWKS client per test (each serves its own keys)
    return resource


def test_the_metadata_names_the_resource_and_its_issuer_and_a_401_points_at_it(gateway_url, oauth_on):
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp/servers/fs",  # the gateway is inside the one resource
    ):
        response = httpx2.get(gateway_url + path)
        assert response.status_code == 200
        document = response.json()
        assert document["resource"] == oauth_on and document["authorization_servers"] == [ISSUER]
        assert (
            document["bearer_methods_supported"] == ["header"]
            and scopes.MCP_GATEWAY in document["scopes_supported"]
        )
    response = httpx2.post(gateway_url + "/mcp", json=INITIALIZE)
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    metadata = f"{gateway_url}/.well-known/oauth-protected-resource/mcp"
    assert challenge.startswith("Bearer ") and f'resource_metadata="{metadata}"' in challenge
    assert "invalid_token" not in challenge
    assert httpx2.get(gateway_url + "/.well-known/oauth-protected-resource/mcpx").status_code == 404
    bad = httpx2.post(gateway_url + "/mcp", json=INITIALIZE, headers={"Authorization": "Bearer not-a-key"})
    assert bad.status_code == 401 and 'error="invalid_token"' in bad.headers["www-authenticate"]


def test_without_an_issuer_there_is_no_metadata_and_keys_work_as_before(gateway_url):
    assert httpx2.get(gateway_url + "/.well-known/oauth-protected-resource/mcp").status_code == 404
    response = httpx2.post(gateway_url + "/mcp", json=INITIALIZE)
    assert response.status_code == 401 and "resource_metadata" not in response.headers["www-authenticate"]
    key = make_role_key("reader", "operator", scopes=[scopes.INCIDENTS_READ])
    assert not call(gateway_url + "/mcp", key.raw, "list_incidents", {}).is_error


def test_a_valid_token_acts_through_its_users_key_with_the_tokens_scopes(gateway_url, oauth_on, jwks):
    alice = make_role_key("alice", "operator", scopes=[scopes.INCIDENTS_READ])
    make_key(name="mcp-oauth", owner=alice.key.owner, scopes=[scopes.INCIDENTS_READ, scopes.INCIDENTS_WRITE])
    token = jwks[0].token(oauth_on, scope=f"{scopes.INCIDENTS_READ} {scopes.MCP_GATEWAY}")
    assert not call(gateway_url + "/mcp", token, "list_incidents", {}).is_error
    refused = call(gateway_url + "/mcp", token, "open_incident", {"text": "the api is down"})
    assert refused.is_error and "missing_scope" in text(refused)  # the key has it, the token does not
    assert not call(gateway_url + "/mcp", alice.raw, "list_incidents", {}).is_error  # the key still works

    no_scope = jwks[0].token(oauth_on)
    assert "missing_scope" in text(call(gateway_url + "/mcp", no_scope, "list_incidents", {}))


@pytest.mark.parametrize(
    "problem",
    ["expired", "other_audience", "other_issuer", "unknown_user", "hs256", "none", "no_key", "other_signer"],
)
def test_a_token_that_is_not_valid_here_is_a_401(gateway_url, oauth_on, jwks, problem):
    alice = make_role_key("alice", "operator", scopes=[scopes.INCIDENTS_READ])
    if problem != "no_key":
        make_key(name="mcp-oauth", owner=alice.key.owner, scopes=[scopes.INCIDENTS_READ])
    state = jwks[0]
    read = scopes.INCIDENTS_READ
    now = int(time.time())
    public_pem = state.key.public_key().public_bytes(
        encoding=serialization.Encoding.PEM, format=serialization.PublicFormat.SubjectPublicKeyInfo
    )
    tokens = {
        "expired": state.token(oauth_on, scope=read, iat=now - 900, exp=now - 600),
        "other_audience": state.token("https://elsewhere.example/mcp", scope=read),
        "other_issuer": state.token(oauth_on, scope=read, iss="https://evil.example"),
        "unknown_user": state.token(oauth_on, scope=read, sub="mallory"),
        "no_key": state.token(oauth_on, scope=read),
        "hs256": _hs256(public_pem, oauth_on, now),
        "none": _unsigned(oauth_on, now),
        "other_signer": Jwks().token(oauth_on, scope=read),
    }
    response = httpx2.post(
        gateway_url + "/mcp",
        json=INITIALIZE,
        headers={
            "Authorization": f"Bearer {tokens[problem]}",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert response.status_code == 401, problem
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


def _hs256(secret: bytes, audience: str, now: int) -> str:
    """A token signed with HMAC over the issuer's public key (the algorithm-confusion attack)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    head = part({"alg": "HS256", "typ": "JWT", "kid": "k1"})
    body = part(
        {"iss": ISSUER, "aud": audience, "sub": "alice", "exp": now + 300, "scope": scopes.INCIDENTS_READ}
    )
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _unsigned(audience: str, now: int) -> str:
    return jwt.encode(
        {"iss": ISSUER, "aud": audience, "sub": "alice", "exp": now + 300, "scope": scopes.INCIDENTS_READ},
        None,
        algorithm="none",
    )


def test_a_slow_jwks_stalls_no_concurrent_chat_call(gateway_url, oauth_on, jwks, backends):
    alice = make_role_key("alice", "operator", scopes=[scopes.INCIDENTS_READ])
    make_key(name="mcp-oauth", owner=alice.key.owner, scopes=[scopes.INCIDENTS_READ])
    state = jwks[0]
    state.delay_s = 3.0
    token = state.token(oauth_on, scope=scopes.INCIDENTS_READ)
    outcome: dict[str, int] = {}

    def session() -> None:
        outcome["status"] = post(gateway_url + "/mcp", token, INITIALIZE).status_code

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
    assert outcome["status"] == 200 and state.fetches >= 1
    assert len(latencies) >= 3 and max(latencies) < bound(1.0), latencies


def test_an_issuer_without_its_jwks_or_resource_stops_start_up_naming_the_variable(settings):
    from django.core.exceptions import ImproperlyConfigured

    from app import conf

    edge = settings.SKILLGATE["MCP_EDGE"]
    settings.SKILLGATE = {**settings.SKILLGATE, "MCP_EDGE": {**edge, "OAUTH_ISSUER": ISSUER}}
    with pytest.raises(ImproperlyConfigured, match="SKILLGATE_MCP_OAUTH_JWKS_URL"):
        conf.get()
    jwks_url = "https://idp.example.test/jwks"
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "MCP_EDGE": {**edge, "OAUTH_ISSUER": ISSUER, "OAUTH_JWKS_URL": jwks_url, "OAUTH_RESOURCE": "/mcp"},
    }
    with pytest.raises(ImproperlyConfigured, match="SKILLGATE_MCP_OAUTH_RESOURCE"):
        conf.get()


def test_the_jwks_url_is_under_the_url_policy(gateway_url, oauth_on, jwks, settings):
    alice = make_role_key("alice", "operator", scopes=[scopes.INCIDENTS_READ])
    make_key(name="mcp-oauth", owner=alice.key.owner, scopes=[scopes.INCIDENTS_READ])
    token = jwks[0].token(oauth_on, scope=scopes.INCIDENTS_READ)
    settings.MCP_URL_ALLOW_PRIVATE = False  # the JWKS on 127.0.0.1: refused, as a registered server is
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    refused = httpx2.post(gateway_url + "/mcp", json=INITIALIZE, headers=headers)
    assert refused.status_code == 401 and jwks[0].fetches == 0  # never fetched
    settings.MCP_URL_ALLOW_PRIVATE = True
    assert httpx2.post(gateway_url + "/mcp", json=INITIALIZE, headers=headers).status_code == 200
    assert jwks[0].fetches == 1
