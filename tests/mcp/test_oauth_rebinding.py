"""DNS rebinding against ``/mcp``'s OAuth fetches (the issuer's JWKS and its RFC 7662 introspection
endpoint), on the running server: the operator's IdP name answers one address to the URL policy's check
and another to the connect. The resolver is the edge of the world here (``socket.getaddrinfo``, which
the event loop's resolver calls too, replaced for that one name); each fetch resolves the name once,
checks the address and connects to that address with ``Host`` still the name, so a name that answers a
public address and then 127.0.0.1 never reaches the loopback endpoint (the policy refuses loopback
here), and one that answers the allowed loopback endpoint and then the metadata address still gets its
keys from the address it checked."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import httpx2
import pytest

from app.mcp import introspection, oauth
from routing import scopes
from tests.factories import make_key, make_role_key
from tests.mcp.test_introspection import Idp, _edge, idp, idp_server  # noqa: F401 (its fixtures)
from tests.mcp.test_oauth import ISSUER, Jwks
from tests.mcp.test_sessions import INITIALIZE

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "idp-rebind.test"
PUBLIC = "93.184.216.34"  # a global address: the policy allows it
METADATA = "169.254.169.254"


@dataclass
class Resolver:
    """Answers ``NAME`` with the next of ``answers`` (the last one repeated); records each answer."""

    answers: list[str]
    given: list[str] = field(default_factory=list)

    def _answer(self, port: Any) -> list[Any]:
        address = self.answers[min(len(self.given), len(self.answers) - 1)]
        self.given.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port)))]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Both resolvers a connect can ask: the C library's (``socket.getaddrinfo``: urllib, asyncio's
        loop) and anyio's (on the server's uvloop, libuv resolves without the former)."""
        real: Callable[..., Any] = socket.getaddrinfo
        real_async: Callable[..., Any] = anyio.getaddrinfo

        def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if host in (NAME, NAME.encode()):
                return self._answer(port)
            return real(host, port, *args, **kwargs)

        async def resolve_async(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if host in (NAME, NAME.encode()):
                return self._answer(port)
            return await real_async(host, port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", resolve)
        monkeypatch.setattr(anyio, "getaddrinfo", resolve_async)


@dataclass
class JwksServer:
    jwks: Jwks
    port: int
    hosts: list[str] = field(default_factory=list)  # the Host header of each fetch that arrived


@pytest.fixture
def jwks_by_name(settings: Any, gateway_url: str) -> Iterator[tuple[JwksServer, str]]:
    """A real JWKS on 127.0.0.1, configured by the name ``NAME`` (as an operator names their IdP)."""
    state = JwksServer(Jwks(), 0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.hosts.append(self.headers.get("Host", ""))
            document = state.jwks.document
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(document)))
            self.end_headers()
            self.wfile.write(document)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    resource = gateway_url + "/mcp"
    _edge(
        settings,
        OAUTH_ISSUER=ISSUER,
        OAUTH_JWKS_URL=f"http://{NAME}:{state.port}/jwks.json",
        OAUTH_RESOURCE=resource,
    )
    oauth._jwks.cache_clear()
    yield state, resource
    oauth._jwks.cache_clear()
    server.shutdown()


def _initialize(gateway_url: str, token: str) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    return httpx2.post(gateway_url + "/mcp", json=INITIALIZE, headers=headers, timeout=30)


def _alice() -> None:
    alice = make_role_key("alice", "operator", scopes=[scopes.INCIDENTS_READ])
    make_key(name="mcp-oauth", owner=alice.key.owner, scopes=[scopes.INCIDENTS_READ])


def test_a_jwks_name_that_rebinds_to_loopback_after_the_check_is_never_fetched(
    gateway_url, jwks_by_name, settings, monkeypatch
):
    state, resource = jwks_by_name
    _alice()
    settings.MCP_URL_ALLOW_PRIVATE = False  # loopback refused: the IdP is meant to be public
    resolver = Resolver([PUBLIC, "127.0.0.1"])
    resolver.install(monkeypatch)
    token = state.jwks.token(resource, scope=scopes.INCIDENTS_READ)
    assert _initialize(gateway_url, token).status_code == 401
    assert state.hosts == []  # the loopback JWKS was never reached
    assert resolver.given == [PUBLIC]  # resolved once: the connect went to the address checked


def test_a_jwks_fetch_connects_to_the_address_it_checked_keeping_the_host(
    gateway_url, jwks_by_name, settings, monkeypatch
):
    state, resource = jwks_by_name
    _alice()
    settings.MCP_URL_ALLOW_PRIVATE = True  # the operator's IdP on a private address, allowed
    resolver = Resolver(["127.0.0.1", METADATA])
    resolver.install(monkeypatch)
    token = state.jwks.token(resource, scope=scopes.INCIDENTS_READ)
    assert _initialize(gateway_url, token).status_code == 200
    assert state.hosts == [f"{NAME}:{state.port}"]  # pinned to 127.0.0.1, the Host still the name
    assert resolver.given == ["127.0.0.1"]  # the metadata answer was never asked for, never used
    assert _initialize(gateway_url, token).status_code == 200  # the keys are cached: no second fetch
    assert state.hosts == [f"{NAME}:{state.port}"] and METADATA not in resolver.given


def _introspection_by_name(settings: Any, idp_url: str) -> str:
    port = int(idp_url.rsplit(":", 1)[1].split("/")[0])
    url = f"http://{NAME}:{port}/oauth2/introspect"
    _edge(settings, OAUTH_INTROSPECTION_URL=url)
    introspection.forget()
    return url


def test_an_introspection_name_that_rebinds_to_loopback_after_the_check_is_never_asked(
    gateway_url: str,
    idp: Idp,  # noqa: F811
    idp_server: tuple[Idp, str],  # noqa: F811
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _introspection_by_name(settings, idp_server[1])
    _alice()
    settings.MCP_URL_ALLOW_PRIVATE = False
    resolver = Resolver([PUBLIC, "127.0.0.1"])
    resolver.install(monkeypatch)
    token = idp.active("t-rebind", scope=scopes.INCIDENTS_READ)
    assert _initialize(gateway_url, token).status_code == 401
    assert idp.asked == [] and resolver.given == [PUBLIC]


def test_an_introspection_request_connects_to_the_address_it_checked(
    gateway_url: str,
    idp: Idp,  # noqa: F811
    idp_server: tuple[Idp, str],  # noqa: F811
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _introspection_by_name(settings, idp_server[1])
    _alice()
    settings.MCP_URL_ALLOW_PRIVATE = True
    resolver = Resolver(["127.0.0.1", METADATA])
    resolver.install(monkeypatch)
    token = idp.active("t-pinned", scope=scopes.INCIDENTS_READ)
    assert _initialize(gateway_url, token).status_code == 200
    assert idp.asked == ["t-pinned"] and resolver.given == ["127.0.0.1"]
