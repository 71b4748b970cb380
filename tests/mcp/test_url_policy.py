"""The URL policy for registered MCP servers (diagnostics/mcp/urls.py), on its own: every address a name
resolves to is checked, IPv4 inside IPv6 unwrapped, metadata and link-local always refused, loopback and
private by the operator's setting, host allow and deny lists, and the guard under the SDK's httpx client
refusing another origin before anything is sent."""

from __future__ import annotations

import ipaddress

import anyio
import httpx2
import pytest

from diagnostics.mcp.urls import GuardedTransport, UrlPolicy, UrlRefused, address_problem, url_problem

STRICT = UrlPolicy()
PRIVATE_OK = UrlPolicy(allow_private=True)


@pytest.mark.parametrize(
    ("address", "strict", "private_ok"),
    [
        ("169.254.169.254", "metadata", "metadata"),
        ("169.254.10.1", "link-local", "link-local"),
        ("fe80::1", "link-local", "link-local"),
        ("::ffff:169.254.169.254", "metadata", "metadata"),
        ("64:ff9b::a9fe:a9fe", "metadata", "metadata"),  # NAT64 of 169.254.169.254
        ("2002:a9fe:a9fe::1", "metadata", "metadata"),  # 6to4 of 169.254.169.254
        ("fd00:ec2::254", "metadata", "metadata"),
        ("100.100.100.200", "metadata", "metadata"),
        ("0.0.0.0", "not a unicast", "not a unicast"),
        ("224.0.0.1", "not a unicast", "not a unicast"),
        ("127.0.0.1", "loopback or private", ""),
        ("::1", "loopback or private", ""),
        ("10.1.2.3", "loopback or private", ""),
        ("100.64.0.1", "loopback or private", ""),  # shared address space
        ("8.8.8.8", "", ""),
    ],
)
def test_each_address_is_checked_with_ipv4_unwrapped(address, strict, private_ok):
    ip = ipaddress.ip_address(address)
    found, found_private = address_problem(ip, STRICT), address_problem(ip, PRIVATE_OK)
    assert (strict in found if strict else found == "") and (
        private_ok in found_private if private_ok else found_private == ""
    )


def test_urls_by_form_name_and_lists():
    assert "scheme" in url_problem("file:///etc/passwd", PRIVATE_OK)
    assert "user or password" in url_problem("http://u:p@127.0.0.1/mcp", PRIVATE_OK)
    assert "metadata" in url_problem("http://2852039166/", PRIVATE_OK)  # one number, resolved
    assert "loopback" in url_problem("http://localhost:8000/mcp", STRICT)  # a name, resolved
    assert "loopback" in url_problem("http://0177.0.0.1/mcp", STRICT)  # octal
    assert url_problem("http://127.0.0.1:8000/mcp", PRIVATE_OK) == ""
    deny = UrlPolicy(allow_private=True, deny_hosts=("*.internal", "localhost"))
    assert "deny list" in url_problem("http://LOCALHOST./mcp", deny)
    assert "deny list" in url_problem("http://metadata.google.internal/", deny)
    allow = UrlPolicy(allow_private=True, allow_hosts=("mcp.example.com",))
    assert "not on the allow list" in url_problem("http://127.0.0.1/mcp", allow)


def test_the_guard_refuses_another_origin_and_a_refused_address_before_sending():
    sent: list[httpx2.Request] = []

    class Recorder(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            sent.append(request)
            return httpx2.Response(200, json={})

    async def go(url: str, policy: UrlPolicy) -> str:
        guard = GuardedTransport(Recorder(), "http://127.0.0.1:8123/mcp", policy)
        async with httpx2.AsyncClient(transport=guard) as client:
            try:
                await client.post(url, json={})
            except UrlRefused as exc:
                return str(exc)
        return ""

    assert "another origin" in anyio.run(go, "http://127.0.0.1:8124/mcp", PRIVATE_OK)
    assert "another origin" in anyio.run(go, "http://localhost:8123/mcp", PRIVATE_OK)
    assert "loopback or private" in anyio.run(go, "http://127.0.0.1:8123/mcp", STRICT)
    assert sent == []
    assert anyio.run(go, "http://127.0.0.1:8123/mcp", PRIVATE_OK) == ""
    assert str(sent[0].url) == "http://127.0.0.1:8123/mcp" and sent[0].headers["host"] == "127.0.0.1:8123"
