"""The streams the ``mcp`` SDK's ``Client`` talks over, for one short connection to an upstream:

- ``stdio``: the server is a child process behind the bounded relay (:mod:`diagnostics.mcp.relay`);
- ``http``: Streamable HTTP;
- ``sse``: the older HTTP+SSE transport (protocol 2024-11-05): a ``GET`` event stream that names the
  URL to ``POST`` messages to (the SDK's ``sse_client``).

Both HTTP kinds use one httpx client built here: every request goes through the URL policy's guard
(:class:`~diagnostics.mcp.urls.GuardedTransport`: the registered origin only, each resolved address
checked, the connection pinned) over the byte cap (:class:`~diagnostics.mcp.capped.CappedTransport`),
with the server's timeout and no proxy from the environment. An SSE upstream's event stream is one
response, so the cap bounds everything it sends in one connection, and the server's timeout bounds
how long it is held.

A server registered as ``http`` that answers the opening ``POST`` with 400, 404 or 405 is an older SSE
server: the MCP specification's backwards-compatibility rule has the client try a ``GET`` for the event
stream next (:func:`legacy_sse_hint`; client.py retries once with ``sse`` within the same deadline).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx2
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from diagnostics.mcp import relay
from diagnostics.mcp.capped import CappedTransport
from diagnostics.mcp.errors import UpstreamError
from diagnostics.mcp.urls import GuardedTransport

if TYPE_CHECKING:
    from diagnostics.mcp.client import Upstream

STDIO = "stdio"
HTTP = "http"
SSE = "sse"
TRANSPORTS = (STDIO, HTTP, SSE)
LEGACY_STATUSES = frozenset({400, 404, 405})


def relayed(upstream: Upstream) -> list[str]:
    """The stdio command behind the bounded relay (run isolated: stdlib only, any working directory)."""
    return [sys.executable, "-I", relay.__file__, str(upstream.read_cap_bytes), "--", *upstream.command]


def _http_client(upstream: Upstream, capped: CappedTransport, headers: dict[str, str]) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(upstream.timeout_s),
        transport=GuardedTransport(capped, upstream.url, upstream.url_policy),
        follow_redirects=True,  # each hop goes through the guard: same origin, checked address
        max_redirects=3,
        trust_env=False,  # no proxy from the environment: every request goes through the guard
    )


class StreamsTransport:
    """The SDK ``Client`` takes a transport: an async context manager yielding the two streams.
    ``refused`` says, once it has closed, whether an answer passed the read cap; ``first_status`` is the
    HTTP status of the first response (None for stdio, or when none came)."""

    def __init__(self, upstream: Upstream, kind: str | None = None) -> None:
        self.refused = False
        self.first_status: int | None = None
        self.kind = kind or upstream.transport
        self._cm = self._transport(upstream)

    @asynccontextmanager
    async def _transport(self, upstream: Upstream) -> AsyncIterator[Any]:
        secrets = upstream.secrets()
        if self.kind == STDIO:
            if not upstream.command:
                raise UpstreamError(f"MCP server {upstream.name!r} has no command.", kind="protocol")
            command = relayed(upstream)
            params = StdioServerParameters(
                command=command[0], args=command[1:], env=secrets, cwd=upstream.cwd
            )
            # the relay's stderr (the server's goes nowhere): a line or two, read after it has exited
            with tempfile.TemporaryFile("w+") as errlog:
                try:
                    async with stdio_client(params, errlog=errlog) as streams:
                        yield streams
                finally:
                    errlog.seek(0)
                    self.refused = errlog.read(4096).startswith(relay.TOO_LARGE)
            return
        if self.kind not in (HTTP, SSE):
            raise UpstreamError(f"MCP server {upstream.name!r} has an unknown transport.", kind="protocol")
        capped = CappedTransport(upstream.read_cap_bytes)
        try:
            if self.kind == HTTP:
                async with (
                    _http_client(upstream, capped, secrets) as http,
                    streamable_http_client(
                        upstream.url, http_client=http, max_sse_event_size=upstream.read_cap_bytes
                    ) as streams,
                ):
                    yield streams
            else:

                def factory(
                    headers: dict[str, str] | None = None,
                    timeout: httpx2.Timeout | None = None,
                    auth: httpx2.Auth | None = None,
                ) -> httpx2.AsyncClient:
                    return _http_client(upstream, capped, {**(headers or {}), **secrets})

                async with sse_client(
                    upstream.url,
                    timeout=upstream.timeout_s,
                    sse_read_timeout=upstream.timeout_s,
                    httpx_client_factory=factory,
                ) as streams:
                    yield streams
        finally:
            self.refused = capped.refused
            self.first_status = capped.first_status

    async def __aenter__(self) -> Any:
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._cm.__aexit__(*exc)


def legacy_sse_hint(upstream: Upstream, transport: StreamsTransport) -> bool:
    """Whether a failed ``http`` connection looks like an older SSE server (the spec's fallback rule)."""
    return upstream.transport == HTTP and transport.kind == HTTP and transport.first_status in LEGACY_STATUSES
