"""One HTTP exchange with an endpoint the operator configured for ``/mcp``'s OAuth (the issuer's JWKS and
its introspection endpoint), under the URL policy of registered MCP servers: through
:class:`~diagnostics.mcp.urls.GuardedTransport`, as every MCP upstream request is, so the configured
origin only (no redirect followed: a 3xx is not the answer), the host resolved once per request, every
address it resolves to checked, and the connection made to the address checked (``Host`` and TLS's SNI
still the name), so a name that answers a public address to the check and a loopback or metadata address
to the connect (DNS rebinding) never reaches the second. Awaited within ``timeout_s`` for the whole
exchange; at most ``max_bytes`` read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx2

from diagnostics.mcp.selectors import url_policy
from diagnostics.mcp.urls import GuardedTransport


class Unavailable(Exception):
    """The endpoint gave no usable answer (unreachable, refused by the URL policy, slow, non-200, too big)."""


async def fetched(
    method: str,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
    form: Mapping[str, str] | None = None,
) -> bytes:
    """The body of a 200 answer to ``method url``; raises :class:`Unavailable` on anything else."""
    transport = GuardedTransport(httpx2.AsyncHTTPTransport(), url, url_policy())
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async with httpx2.AsyncClient(transport=transport, timeout=timeout_s) as client:
                request = client.stream(method, url, data=dict(form) if form else None, headers=headers)
                async with request as response:
                    if response.status_code != 200:
                        raise Unavailable(f"it answered {response.status_code}")
                    async for piece in response.aiter_bytes():
                        body += piece
                        if len(body) > max_bytes:
                            raise Unavailable(f"its answer is over {max_bytes} bytes")
    except TimeoutError as exc:
        raise Unavailable(f"no answer within {timeout_s:g} s") from exc
    except httpx2.HTTPError as exc:
        raise Unavailable(str(exc) or type(exc).__name__) from exc
    return bytes(body)


def fetched_blocking(url: str, *, timeout_s: float, max_bytes: int) -> bytes:
    """:func:`fetched` (a GET) from a worker thread that runs no event loop (its own loop, for this one
    exchange)."""
    return asyncio.run(fetched("GET", url, timeout_s=timeout_s, max_bytes=max_bytes))
