"""The HTTP clients bench/upstream_client.py compares: each makes the same call (one POST of the same body,
the answer read whole, or a stream read to its end) with one pooled, keep-alive client per event loop.

A candidate is an async factory returning ``(whole, streamed, close)``; ``gateway`` is Skillgate's own
upstream call (routing/call/upstream.py through routing/call/openai_client.py), which parses what it reads.
A candidate whose package is not installed is skipped (its row says so).
"""

from __future__ import annotations

import importlib.util
import inspect
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

Call = Callable[[], Awaitable[Any]]
Made = tuple[Call, Call, Call]

BODY = b'{"model":"bench-model","messages":[{"role":"user","content":"Say a few words."}],"max_tokens":64}'
STREAM_BODY = BODY[:-1] + b',"stream":true,"stream_options":{"include_usage":true}}'
HEADERS = {"content-type": "application/json", "authorization": "Bearer none"}
POOL = 1000  # connections at most, as routing's UPSTREAM_MAX_CONNECTIONS
IDLE = 100  # idle connections kept, as UPSTREAM_MAX_KEEPALIVE


def _events(piece: bytes | memoryview) -> int:
    return bytes(piece).count(b"\n\n")


async def httpx_client(url: str) -> Made:
    import httpx

    limits = httpx.Limits(max_connections=POOL, max_keepalive_connections=IDLE, keepalive_expiry=4.0)
    http = httpx.AsyncClient(limits=limits, follow_redirects=False, timeout=60)

    async def whole() -> Any:
        response = await http.post(url, content=BODY, headers=HEADERS)
        return response.content

    async def streamed() -> Any:
        async with http.stream("POST", url, content=STREAM_BODY, headers=HEADERS) as response:
            return sum([_events(piece) async for piece in response.aiter_bytes()])

    return whole, streamed, http.aclose


async def aiohttp_client(url: str) -> Made:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=POOL, limit_per_host=0, keepalive_timeout=4.0)
    timeout = aiohttp.ClientTimeout(total=60)
    http = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)

    async def whole() -> Any:
        async with http.post(url, data=BODY, headers=HEADERS, allow_redirects=False) as response:
            return await response.read()

    async def streamed() -> Any:
        async with http.post(url, data=STREAM_BODY, headers=HEADERS, allow_redirects=False) as response:
            return sum([_events(piece) async for piece in response.content.iter_any()])

    return whole, streamed, http.close


async def pyreqwest_client(url: str) -> Made:
    from pyreqwest.client import ClientBuilder

    http = (
        ClientBuilder()
        .max_connections(POOL)
        .pool_max_idle_per_host(IDLE)
        .pool_idle_timeout(timedelta(seconds=4))
        .timeout(timedelta(seconds=60))
        .follow_redirects(False)
        .build()
    )

    async def whole() -> Any:
        response = await http.post(url).headers(HEADERS).body_bytes(BODY).build().send()
        return await response.bytes()

    async def streamed() -> Any:
        request = http.post(url).headers(HEADERS).body_bytes(STREAM_BODY).build_streamed()
        async with request as response:
            reader, events = response.body_reader, 0
            while (piece := await reader.read_chunk()) is not None:
                events += _events(piece)
            return events

    return whole, streamed, http.close


async def wreq_client(url: str) -> Made:
    import wreq

    http = wreq.Client(
        pool_max_size=POOL,
        pool_max_idle_per_host=IDLE,
        pool_idle_timeout=timedelta(seconds=4),
        timeout=timedelta(seconds=60),
    )

    async def whole() -> Any:
        async with await http.post(url, body=BODY, headers=HEADERS) as response:
            return await response.bytes()

    async def streamed() -> Any:
        response = await http.post(url, body=STREAM_BODY, headers=HEADERS)
        async with response, response.stream() as chunks:
            return sum([_events(piece) async for piece in chunks if not isinstance(piece, dict)])

    async def close() -> None:
        return None

    return whole, streamed, close


async def curl_cffi_client(url: str) -> Made:
    from curl_cffi.requests import AsyncSession

    http: Any = AsyncSession(max_clients=POOL, timeout=60, allow_redirects=False)

    async def whole() -> Any:
        response = await http.post(url, data=BODY, headers=HEADERS)
        return response.content

    async def streamed() -> Any:
        async with http.stream("POST", url, data=STREAM_BODY, headers=HEADERS) as response:
            return sum([_events(piece) async for piece in response.aiter_content()])

    return whole, streamed, http.close


CANDIDATES: dict[str, tuple[str, Callable[[str], Awaitable[Made]] | None]] = {
    "httpx": ("httpx", httpx_client),
    "aiohttp": ("aiohttp", aiohttp_client),
    "pyreqwest": ("pyreqwest", pyreqwest_client),
    "wreq": ("wreq", wreq_client),
    "curl_cffi": ("curl_cffi", curl_cffi_client),
    "gateway": ("django", None),  # bench/upstream_gateway.py: its child sets Django up first
}


class PoolClock:
    """CPU time spent in the connection pool's own bookkeeping (finding a connection for a request,
    putting it back): httpcore's ``_assign_requests_to_connections`` (it scans every connection and
    request, per request and per release), aiohttp's ``_get`` and ``_release`` (a deque per host).
    Neither suspends on a reused connection, so ``thread_time`` around them is theirs alone."""

    def __init__(self) -> None:
        self.ns = 0

    def wrap(self, owner: type, name: str) -> None:
        original = getattr(owner, name)
        clock = time.thread_time_ns

        if inspect.iscoroutinefunction(original):

            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                started = clock()
                try:
                    return await original(*args, **kwargs)
                finally:
                    self.ns += clock() - started

            setattr(owner, name, timed_async)
        else:

            def timed(*args: Any, **kwargs: Any) -> Any:
                started = clock()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.ns += clock() - started

            setattr(owner, name, timed)


def pool_clock(name: str) -> PoolClock | None:
    """A clock on ``name``'s pool (httpx, aiohttp and the gateway, which uses aiohttp); else None."""
    clock = PoolClock()
    if name == "httpx":
        from httpcore import AsyncConnectionPool

        clock.wrap(AsyncConnectionPool, "_assign_requests_to_connections")
        return clock
    if name in ("aiohttp", "gateway"):
        from aiohttp.connector import BaseConnector

        clock.wrap(BaseConnector, "_get")
        clock.wrap(BaseConnector, "_release")
        return clock
    return None


def installed(name: str) -> bool:
    return importlib.util.find_spec(CANDIDATES[name][0]) is not None
