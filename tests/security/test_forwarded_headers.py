"""Forwarding headers are the client's own claims unless a trusted proxy wrote them (issue 37, class 4;
round seven).

The app believed ``X-Forwarded-For`` and ``X-Forwarded-Proto`` only from ``SKILLGATE_TRUSTED_PROXIES``
(uvicorn's middleware), but left the headers in the request, and Django reads some of them itself:
``SECURE_PROXY_SSL_HEADER``, which the security page told operators to set behind TLS, takes the
scheme from the raw header whatever the peer. So a client that reached the port directly (another pod,
a host on the node's network) sent ``X-Forwarded-Proto: https`` over plain HTTP and was served as
HTTPS: ``SECURE_SSL_REDIRECT`` let it through (200 instead of the 301), and every ``is_secure()``
decision was its to make. Now every forwarding header from a peer that is not a trusted proxy is
removed at the edge (app/edge.py ``trusted_forwarding``), before Django or anything else reads it.

Driven through ``python -m app.serve`` as deployed, with the TLS settings the page lists: the test
client connects from 127.0.0.1 (not trusted) and, as the proxy, from 127.0.0.2 (trusted).
"""

from __future__ import annotations

import httpx
import pytest

from app.edge import FORWARDED_HEADERS, _without_forwarded
from tests.support.gateway_process import APP_SERVE, gateway_process

pytestmark = pytest.mark.django_db(transaction=True)

PROXY = "127.0.0.2"  # the loopback network is all local: the proxy's connections come from here
TLS = {
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO",
    "SECURE_SSL_REDIRECT": "1",
    "SKILLGATE_TRUSTED_PROXIES": PROXY,
}
CLAIMS = {
    "X-Forwarded-Proto": "https",
    "X-Forwarded-For": "203.0.113.9",
    "X-Forwarded-Host": "evil.example",
    "Forwarded": "for=203.0.113.9;proto=https",
}


def get(url: str, source: str, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=30) as client:
        return client.get(f"{url}/accounts/login/", headers=headers)


def test_a_client_cannot_claim_https_and_a_trusted_proxy_can(tmp_path):
    with gateway_process("forwarded", tmp_path, env=TLS, serve=APP_SERVE) as server:
        plain = get(server.url, "127.0.0.1", {})
        assert plain.status_code == 301 and plain.headers["location"].startswith("https://")

        forged = get(server.url, "127.0.0.1", CLAIMS)
        assert forged.status_code == 301, "a client's own X-Forwarded-Proto made the request HTTPS"
        assert forged.headers["location"].startswith("https://127.0.0.1:")  # not the claimed host

        proxied = get(server.url, PROXY, {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"})
        assert proxied.status_code == 200, proxied.text[:300]  # the proxy's word is taken


def test_forwarding_headers_are_removed_from_an_untrusted_peers_request():
    scope = {
        "type": "http",
        "headers": [(b"host", b"x"), (b"X-Forwarded-Proto", b"https"), (b"x-real-ip", b"1.2.3.4")],
    }
    assert _without_forwarded(scope)["headers"] == [(b"host", b"x")]
    clean = {"type": "http", "headers": [(b"host", b"x")]}
    assert _without_forwarded(clean) is clean  # the hot path copies nothing
    assert b"x-forwarded-host" in FORWARDED_HEADERS and b"forwarded" in FORWARDED_HEADERS
