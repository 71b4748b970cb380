"""Where a registered MCP server's URL may point: the URL policy, checked at registration and on every
connect and every redirect (plain Python, no ORM).

- the scheme is ``http`` or ``https``; no user or password in the URL (credentials go by ``secret_env``);
- the host is on the operator's allow list when there is one (``SKILLGATE_MCP_URL_ALLOW_HOSTS``) and on
  no deny list (``SKILLGATE_MCP_URL_DENY_HOSTS``); entries are host names, ``*.example.com`` for a domain,
  and on the deny list also addresses or networks (``10.0.0.5``, ``10.0.0.0/8``), matched against every
  address the host resolves to (so ``167772165`` or ``[::ffff:10.0.0.5]`` is ``10.0.0.5``); a name is
  compared in its IDNA form, as the resolver sees it (full-width ``ｅｘａｍｐｌｅ.com`` is ``example.com``);
- the name is resolved and **every** address it resolves to is checked (an IPv4 address inside IPv6,
  6to4, Teredo or NAT64 is unwrapped first): link-local (169.254.0.0/16, fe80::/10), the cloud metadata
  addresses, unspecified, multicast and reserved addresses are always refused; loopback, private (IPv6's
  deprecated site-local fec0::/10 too, which Python counts global) and other non-global addresses only
  when the operator allows them (``SKILLGATE_MCP_URL_ALLOW_PRIVATE``);
- on every request (:class:`GuardedTransport`, under the SDK's httpx client) the origin must be the
  registered one (a redirect elsewhere is refused: the upstream's headers would follow it), the host is
  resolved and checked again, and the connection goes to the address checked (pinned; TLS still checks the
  certificate against the name), so a name that resolves elsewhere between the check and the connect
  (DNS rebinding) does not reach a refused address.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx2

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata and host-agent addresses, refused even where private addresses are allowed (most are
# link-local already; Azure's wire server is a public address, Alibaba's in the shared 100.64/10 range).
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "168.63.129.16", "100.100.100.200", "fd00:ec2::254")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class UrlPolicy:
    allow_hosts: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ()
    allow_private: bool = False


class UrlRefused(httpx2.TransportError):
    """A request the URL policy refuses (an ``httpx2`` error: the SDK reports it as unreachable)."""


def _matches(host: str, entries: tuple[str, ...]) -> bool:
    for entry in entries:
        entry = entry.strip().lower().rstrip(".")
        if not entry:
            continue
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and host != entry[2:]:
                return True
        elif host == entry:
            return True
    return False


def _unwrapped(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address.teredo is not None:
            return address.teredo[1]
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def address_problem(address: IPAddress, policy: UrlPolicy) -> str:
    """Why the policy refuses a connection to ``address`` ('' when it does not)."""
    inner = _unwrapped(address)
    for one in (inner, address) if inner != address else (address,):  # the IPv4 inside judged first
        if one in METADATA:
            return f"{one} is a cloud metadata address"
        if one.is_link_local:
            return f"{one} is link-local"
        if one.is_unspecified or one.is_multicast:
            return f"{one} is not a unicast address"
        site_local = isinstance(one, ipaddress.IPv6Address) and one.is_site_local  # fec0::/10: private
        if one.is_loopback or one.is_private or not one.is_global or site_local:
            if not policy.allow_private:
                return (
                    f"{one} is a loopback or private address (the operator allows those with "
                    "SKILLGATE_MCP_URL_ALLOW_PRIVATE=true)"
                )
            continue
        if one.is_reserved:
            return f"{one} is not a unicast address"
    return ""


def canonical_host(host: str) -> str:
    """The host as the resolver sees it: IDNA (NFKC, lower case) without a trailing dot; raises
    UnicodeError on a name IDNA refuses."""
    host = host.strip().rstrip(".")
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    return host.lower().rstrip(".")


def denied_address(address: IPAddress, policy: UrlPolicy) -> str:
    """The deny-list entry (an address or network) ``address`` falls in, or ''."""
    inner = _unwrapped(address)
    for entry in policy.deny_hosts:
        try:
            network = ipaddress.ip_network(entry.strip().strip("[]"), strict=False)
        except ValueError:
            continue  # a host name entry
        if address in network or inner in network:
            return f"{address} is on the deny list (SKILLGATE_MCP_URL_DENY_HOSTS: {entry.strip()})"
    return ""


def host_problem(host: str, policy: UrlPolicy) -> str:
    try:
        host = canonical_host(host)
    except UnicodeError:
        return f"the host {host!r} is not a valid host name"
    if not host:
        return "the URL has no host"
    if _matches(host, policy.deny_hosts):
        return f"the host {host!r} is on the deny list (SKILLGATE_MCP_URL_DENY_HOSTS)"
    if policy.allow_hosts and not _matches(host, policy.allow_hosts):
        return f"the host {host!r} is not on the allow list (SKILLGATE_MCP_URL_ALLOW_HOSTS)"
    return ""


def _addresses(infos: list[tuple[object, ...]]) -> list[IPAddress]:
    found: list[IPAddress] = []
    for info in infos:
        sockaddr = info[4]
        assert isinstance(sockaddr, tuple)
        text = str(sockaddr[0]).split("%", 1)[0]  # an IPv6 zone is not part of the address
        address = ipaddress.ip_address(text)
        if address not in found:
            found.append(address)
    return found


def _parts(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url``; raises ValueError on a URL the policy refuses by its form."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError("the URL's scheme must be http or https")
    if parts.username is not None or parts.password is not None:
        raise ValueError("a user or password in the URL (name credentials in secret_env instead)")
    host = parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)  # port: ValueError when out of range
    return scheme, host, port


def url_problem(url: str, policy: UrlPolicy) -> str:
    """Why ``url`` may not be registered or connected to ('' when it may). Resolves the host (blocking)."""
    try:
        _, host, port = _parts(url)
    except ValueError as exc:
        return str(exc)
    if problem := host_problem(host, policy):
        return problem
    try:
        addresses = _addresses(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))  # type: ignore[arg-type]
    except (OSError, UnicodeError, ValueError):
        return f"the host {host!r} does not resolve"
    for address in addresses:
        if problem := address_problem(address, policy) or denied_address(address, policy):
            return f"the host {host!r} resolves to {problem}" if str(address) != host else problem
    return "" if addresses else f"the host {host!r} does not resolve"


class GuardedTransport(httpx2.AsyncBaseTransport):
    """Every request: the registered origin only, its host resolved and checked, the connection pinned
    to the address checked."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, url: str, policy: UrlPolicy) -> None:
        self._inner = inner
        self._policy = policy
        try:
            self._origin: tuple[str, str, int] | None = _parts(url)
        except ValueError:
            self._origin = None

    async def _checked_address(self, host: str, port: int) -> IPAddress:
        if problem := host_problem(host, self._policy):
            raise UrlRefused(f"refused by the URL policy: {problem}")
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise UrlRefused(f"the host {host!r} does not resolve") from exc
        addresses = _addresses(list(infos))
        if not addresses:
            raise UrlRefused(f"the host {host!r} does not resolve")
        for address in addresses:
            if problem := address_problem(address, self._policy) or denied_address(address, self._policy):
                raise UrlRefused(f"refused by the URL policy: {problem}")
        return addresses[0]

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        scheme, host = url.scheme.lower(), (url.host or "").lower()
        port = url.port or (443 if scheme == "https" else 80)
        if self._origin is None or (scheme, host, port) != (
            self._origin[0],
            self._origin[1].lower(),
            self._origin[2],
        ):
            raise UrlRefused("refused by the URL policy: a request (or redirect) to another origin")
        address = await self._checked_address(host, port)
        extensions = dict(request.extensions)
        if scheme == "https":
            extensions["sni_hostname"] = host
        pinned = httpx2.Request(
            request.method,
            url.copy_with(host=str(address)),
            headers=request.headers,  # Host: still the name
            stream=request.stream,
            extensions=extensions,
        )
        return await self._inner.handle_async_request(pinned)

    async def aclose(self) -> None:
        await self._inner.aclose()
