"""One pooled aiohttp ``ClientSession`` per event loop, and what every request shares.

- **The pool**: HTTP/1.1 keep-alive connections, at most ``UPSTREAM_MAX_CONNECTIONS`` (a request past
  it waits for one, within its connect timeout), at most ``UPSTREAM_MAX_KEEPALIVE`` of them idle per
  upstream (one freed past that is closed), an idle one closed after ``UPSTREAM_KEEPALIVE_S``
  (before uvicorn's, so vLLM's, 5 s). aiohttp keeps a host's idle connections in a deque and takes
  the oldest: a request's cost does not grow with the number of connections (httpcore scanned them
  all, per request and per release: bench/upstream_client.py measures both pools).
- **A loop's session is closed with the loop**: it is held by an async generator the loop knows of,
  so ``asyncio.run`` (a Celery task) closes it when it shuts its async generators down; a server's
  loop at its shutdown. A loop that is gone drops its session when the next loop asks for one.
- **TLS**: verified, against ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set, else certifi's bundle (as
  httpx did); one context for the process (building one reads the bundle, ~30 ms).
- **Proxies**: ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``NO_PROXY`` from the environment (as httpx
  honoured them), looked up once per upstream origin, not per call (aiohttp's ``trust_env`` does it
  per call, in a thread, with a ``.netrc`` look-up besides).
- **No cookies** are kept (an upstream's ``Set-Cookie`` reaches no other call), no redirects followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import ssl
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import certifi
from yarl import URL

from routing import conf
from routing.call.http.failures import TransportFailure, unusable_url

USER_AGENT = "skillgate"


@dataclass
class _Held:
    session: aiohttp.ClientSession
    keeper: AsyncIterator[None]


_sessions: dict[asyncio.AbstractEventLoop, _Held] = {}


@functools.cache
def tls() -> ssl.SSLContext:
    """The process's TLS context for upstreams: certificates and host names verified."""
    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    return ssl.create_default_context(cafile=certifi.where())


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector keeping at most ``max_idle`` idle connections per upstream (it has no such
    bound of its own): a connection freed past it is closed rather than kept."""

    def __init__(self, *, max_idle: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._max_idle = max_idle

    def _release(self, key: Any, protocol: Any, *, should_close: bool = False) -> None:
        idle = self._conns.get(key)
        if len(idle or ()) >= self._max_idle:
            should_close = True
        super()._release(key, protocol, should_close=should_close)


def _new_session() -> aiohttp.ClientSession:
    upstream = conf.get().upstream
    connector = _Connector(
        max_idle=upstream.max_keepalive,
        limit=upstream.max_connections,
        limit_per_host=0,
        keepalive_timeout=upstream.keepalive_s,
        ssl=tls(),
    )
    return aiohttp.ClientSession(
        connector=connector,
        headers={"user-agent": USER_AGENT},
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None),
        trust_env=False,
        raise_for_status=False,
    )


async def _keep(session: aiohttp.ClientSession) -> AsyncIterator[None]:
    """Holds ``session`` until its loop shuts its async generators down, then closes it."""
    try:
        yield
    finally:
        await session.close()


def _start(keeper: AsyncIterator[None]) -> None:
    """Runs ``keeper`` to its ``yield`` (nothing there awaits), so the running loop knows it."""
    step = keeper.__anext__()
    with contextlib.suppress(StopIteration):
        step.send(None)  # type: ignore[attr-defined]


def session() -> aiohttp.ClientSession:
    """The running event loop's pooled session (the server's one loop keeps its connections alive)."""
    loop = asyncio.get_running_loop()
    held = _sessions.get(loop)
    if held is not None and not held.session.closed:
        return held.session
    for other in [other for other in _sessions if other.is_closed()]:
        gone = _sessions.pop(other)
        gone.session.detach()  # its loop is closed: nothing of it can run any more
    made = _new_session()
    keeper = _keep(made)
    _start(keeper)
    _sessions[loop] = _Held(made, keeper)
    return made


async def aclose() -> None:
    """Close the running loop's session (tests, a server's shutdown)."""
    held = _sessions.pop(asyncio.get_running_loop(), None)
    if held is not None:
        await held.session.close()


@functools.lru_cache(maxsize=1024)
def url_of(url: str) -> URL:
    """``url`` parsed once (aiohttp takes the parsed form as it is); raises TransportFailure when it is
    not an absolute http(s) URL."""
    try:
        parsed = URL(url)
    except (ValueError, TypeError) as exc:
        raise TransportFailure("InvalidURL", str(exc), billed=False, timeout=False, retryable=False) from exc
    if parsed.scheme not in ("http", "https"):
        raise unusable_url(url, "scheme")
    if not parsed.host:
        raise unusable_url(url, "host")
    return parsed


@functools.lru_cache(maxsize=1024)
def proxy_for(origin: URL) -> URL | None:
    """The proxy the environment names for ``origin`` (scheme, host, port), or None."""
    host = origin.host or ""
    if urllib.request.proxy_bypass(f"{host}:{origin.port}" if origin.port else host):
        return None
    proxies = urllib.request.getproxies()
    found = proxies.get(origin.scheme) or proxies.get("all")
    return URL(found) if found else None


@functools.lru_cache(maxsize=256)
def timeout_of(seconds: float) -> aiohttp.ClientTimeout:
    """A backend's ``timeout_s`` as httpx's ``Timeout(seconds)`` was: to get a connection (a free place
    in the pool, the connect, TLS) and for each read; no limit on a whole stream that keeps arriving."""
    return aiohttp.ClientTimeout(total=None, connect=seconds, sock_connect=seconds, sock_read=seconds)
