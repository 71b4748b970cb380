"""Talking to one upstream MCP server with the official ``mcp`` SDK: list its tools, call one.

Plain Python (no ORM): the incidents app hands in an :class:`Upstream` built from the operator's
registration. Every connection is short (connect, one request, close): a stdio server is a child process
started for the call and ended after it; a Streamable HTTP server gets one session per call, an older
HTTP+SSE server one event stream per call (transports.py).

Bounds, so that a hostile or broken upstream costs a bounded amount:

- time: the whole connect + request is under ``timeout_s`` (a server that hangs is cut off and its
  process ended by the SDK's shutdown sequence);
- size: no more than ``read_cap_bytes`` (``HARD_CAP_BYTES``) of one answer is ever read: over HTTP the
  SDK's httpx client gets a transport (:mod:`diagnostics.mcp.capped`) that counts each response body as
  it streams and refuses it past the cap; over stdio the server runs behind a relay
  (:mod:`diagnostics.mcp.relay`) that kills it when one line passes the cap, because the SDK's reader
  buffers a whole line. Either refusal is a ``too_large`` error; an answer under the cap is cut to
  ``max_output_bytes`` before it is handed on;
- errors: what an upstream failure says to the caller never names the URL, the command, or a header
  or environment value: :func:`describe_failure` maps each failure to a fixed phrase plus the server's
  own MCP error message, with every secret value scrubbed from it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError

from diagnostics.mcp.classify import fingerprint
from diagnostics.mcp.errors import UpstreamError as UpstreamError
from diagnostics.mcp.secret_env import SecretEnvPolicy
from diagnostics.mcp.transports import SSE, StreamsTransport, legacy_sse_hint
from diagnostics.mcp.transports import relayed as relayed
from diagnostics.mcp.urls import UrlPolicy, UrlRefused
from diagnostics.mcp.vetting import clean_json, clean_text

HARD_CAP_BYTES = 4 * 1024 * 1024

T = TypeVar("T")


@dataclass(frozen=True)
class Upstream:
    """How to reach one registered server. ``secret_env`` names host environment variables only:
    for stdio, child variable -> host variable; for HTTP, header name -> host variable (the value is the
    whole header value, e.g. ``Bearer ...``). The values are read when connecting, never stored."""

    name: str
    transport: str
    command: tuple[str, ...] = ()
    url: str = ""
    secret_env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 20.0
    max_output_bytes: int = 64_000
    cwd: str | None = None
    read_cap_bytes: int = HARD_CAP_BYTES
    url_policy: UrlPolicy = field(default_factory=UrlPolicy)
    secret_policy: SecretEnvPolicy = field(default_factory=SecretEnvPolicy)

    def secrets(self) -> dict[str, str]:
        """The credential values to send; a variable the policy refuses (a row written before the rule,
        or edited around it) fails the connect before anything is sent (secret_env.py)."""
        if problem := self.secret_policy.first_problem(list(self.secret_env.values())):
            raise UpstreamError(
                f"MCP server {self.name!r} was refused its credentials: {problem}.", kind="refused"
            )
        missing = [host for host in self.secret_env.values() if not os.environ.get(host)]
        if missing:
            raise UpstreamError(
                f"MCP server {self.name!r} needs the environment variable {missing[0]} set on the "
                "Skillgate host.",
                kind="missing_secret",
            )
        return {target: os.environ[host] for target, host in self.secret_env.items()}


@dataclass(frozen=True)
class ToolInfo:
    """A tool as the server lists it (plain data)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None


@dataclass(frozen=True)
class ServerListing:
    server_info: dict[str, str]
    tools: list[ToolInfo]


@dataclass(frozen=True)
class CallOutput:
    """A tool's answer: its text (content blocks and structured content), cut to the bound."""

    text: str
    is_error: bool
    size_bytes: int
    truncated: bool
    latency_ms: int


def _secret_values(upstream: Upstream) -> list[str]:
    values = [os.environ.get(host, "") for host in upstream.secret_env.values()]
    tokens = [v.split()[-1] for v in values if v.split()]  # "Bearer abc": the token alone too
    return sorted({v for v in [*values, *tokens] if len(v) >= 4}, key=len, reverse=True)


def too_large(upstream: Upstream) -> UpstreamError:
    return UpstreamError(
        f"MCP server {upstream.name!r} sent an answer over {upstream.read_cap_bytes} bytes; it was refused "
        "(nothing past that was read).",
        kind="too_large",
    )


def describe_failure(upstream: Upstream, exc: BaseException) -> UpstreamError:
    """A failure as the caller may see it: no URL, command, header or secret value."""
    if isinstance(exc, UpstreamError):
        return exc
    name = upstream.name
    if isinstance(exc, TimeoutError):
        return UpstreamError(
            f"MCP server {name!r} did not answer within {upstream.timeout_s:g} s.", kind="timeout"
        )
    if isinstance(exc, MCPError):
        message = exc.message
        for secret in [*_secret_values(upstream), upstream.url, *upstream.command]:
            if secret:
                message = message.replace(secret, "[redacted]")
        if message.strip().lower() == "connection closed":
            return UpstreamError(f"MCP server {name!r} closed the connection mid-call.", kind="unreachable")
        message = clean_text(message)[:500]
        return UpstreamError(f"MCP server {name!r} answered with an error: {message}", kind="protocol")
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        if inner is not exc:
            return describe_failure(upstream, inner)
    if isinstance(exc, UrlRefused):  # the reason names hosts and addresses: the operator's, not a caller's
        return UpstreamError(
            f"MCP server {name!r} was refused by Skillgate's URL policy (its address, or a redirect to "
            "another origin; the SKILLGATE_MCP_URL_* settings).",
            kind="refused",
        )
    if isinstance(exc, OSError | httpx2.HTTPError | anyio.BrokenResourceError | anyio.EndOfStream):
        return UpstreamError(
            f"MCP server {name!r} could not be reached or closed the connection ({type(exc).__name__}).",
            kind="unreachable",
        )
    return UpstreamError(
        f"MCP server {name!r} failed ({type(exc).__name__}); see the Skillgate log.", kind="protocol"
    )


async def with_client(upstream: Upstream, work: Callable[[Client], Awaitable[T]]) -> T:
    """One connection, ``work`` on it, closed; the whole of it (with an ``http`` server's fallback to the
    older SSE transport, transports.py) within ``timeout_s``."""
    transport = StreamsTransport(upstream)
    try:
        with anyio.fail_after(upstream.timeout_s):
            try:
                async with Client(transport, mode="legacy", cache=None) as client:
                    return await work(client)
            except Exception:
                if transport.refused or not legacy_sse_hint(upstream, transport):
                    raise
            transport = StreamsTransport(upstream, SSE)
            async with Client(transport, mode="legacy", cache=None) as client:
                return await work(client)
    except Exception as exc:  # every failure leaves here as an UpstreamError that is safe to show
        if transport.refused:
            raise too_large(upstream) from exc
        raise describe_failure(upstream, exc) from exc


def _annotations(tool: types.Tool) -> dict[str, Any] | None:
    if tool.annotations is None:
        return None
    dumped = tool.annotations.model_dump(by_alias=True, exclude_none=True, mode="json")
    cleaned: dict[str, Any] = clean_json(dumped)
    return cleaned


def tool_info(tool: types.Tool) -> ToolInfo:
    """A listed tool as plain data, its text cleaned of terminal and layout controls (vetting.py); the
    name stays as sent (a name outside the spec's rules is refused, never cleaned into a valid one)."""
    return ToolInfo(
        tool.name,
        clean_text(tool.description or ""),
        clean_json(dict(tool.input_schema)),
        _annotations(tool),
    )


async def list_tools_async(upstream: Upstream) -> ServerListing:
    async def work(client: Client) -> ServerListing:
        tools: list[ToolInfo] = []
        cursor: str | None = None
        for _ in range(50):  # a paginator that never ends cannot hang the listing
            page = await client.list_tools(cursor=cursor)
            tools += [tool_info(t) for t in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                break
        info = client.server_info
        server_info = (
            {"name": clean_text(info.name)[:200], "version": clean_text(info.version)[:100]}
            if info is not None
            else {}
        )
        return ServerListing(server_info=server_info, tools=tools)

    return await with_client(upstream, work)


def render_result(result: types.CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content]")
    if result.structured_content is not None and not parts:
        # cleaned before it is written as JSON: once dumped, a control or an invisible character is an
        # escape ("\u001b", "\udb40\udc49") that clean_text cannot see and a model reads back
        structured = clean_json(result.structured_content)
        parts.append(json.dumps(structured, sort_keys=True, default=str, ensure_ascii=False))
    return clean_text("\n".join(parts))


def cut(text: str, limit: int) -> tuple[str, int, bool]:
    """``text`` cut to ``limit`` UTF-8 bytes: (text, its full size in bytes, whether it was cut)."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit:
        return text, len(raw), False
    kept = raw[:limit].decode("utf-8", "ignore")
    return f"{kept}\n… [cut: {len(raw)} bytes in all, {limit} kept]", len(raw), True


def list_tools(upstream: Upstream) -> ServerListing:
    """The server's tools, from synchronous code (a view's thread, a Celery worker)."""
    return anyio.run(list_tools_async, upstream)


async def checked_call_async(
    upstream: Upstream, tool: str, arguments: dict[str, Any], expected_fingerprint: str
) -> CallOutput | None:
    """Calls ``tool`` only if the server still lists it as classified (same fingerprint), in one session;
    None when it changed or is gone (nothing was called)."""
    started = time.monotonic()

    async def work(client: Client) -> types.CallToolResult | None:
        cursor: str | None = None
        prints: list[str] = []
        for _ in range(50):
            page = await client.list_tools(cursor=cursor)
            prints += [tool_fingerprint(tool_info(t)) for t in page.tools if t.name == tool]
            cursor = page.next_cursor
            if cursor is None:
                break
        if prints != [expected_fingerprint]:  # changed, gone, or listed twice: not the tool classified
            return None
        return await client.call_tool(tool, arguments)

    result = await with_client(upstream, work)
    if result is None:
        return None
    text, size, truncated = cut(render_result(result), upstream.max_output_bytes)
    latency = int((time.monotonic() - started) * 1000)
    return CallOutput(
        text=text, is_error=result.is_error, size_bytes=size, truncated=truncated, latency_ms=latency
    )


def checked_call(
    upstream: Upstream, tool: str, arguments: dict[str, Any], expected_fingerprint: str
) -> CallOutput | None:
    return anyio.run(checked_call_async, upstream, tool, arguments, expected_fingerprint)


def tool_fingerprint(tool: ToolInfo) -> str:
    return fingerprint(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        annotations=tool.annotations,
    )
