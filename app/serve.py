"""One web process on its own SO_REUSEPORT listening socket: ``python -m app.serve --port 8000``.

Several such processes on one port (infra/onebox: supervisord's ``numprocs``) each get a socket of their
own, and the kernel spreads new connections over them by hash. ``uvicorn --workers N`` shares one socket
instead, and asyncio accepts a whole backlog per wake-up, so one busy process takes a burst's
connections while the others idle. Otherwise this is uvicorn as its CLI runs it: SIGTERM drains the
open requests for up to ``--timeout-graceful-shutdown`` seconds (the ledger writer commits meanwhile).

This is the one way the service is served (``manage.py serve``, infra/onebox, the image, Kubernetes),
because of two edge rules (issue 37) that live in the server, not the app:

- uvicorn's own forwarded-header handling is off (``proxy_headers=False``; its default trusts
  ``X-Forwarded-For`` from loopback, so a local client could pick the address the login lockout counts
  against). The app believes forwarded headers only from ``SKILLGATE_TRUSTED_PROXIES``
  (app/edge.py's ``trusted_forwarding``).
- a request's headers must arrive within ``SKILLGATE_BODY_READ_TIMEOUT_S`` of its first byte (of the
  connection, for its first request) and within :data:`MAX_HEADER_BYTES`: a slower or bigger head gets a
  408 or 431 and the connection is closed (:class:`DeadlineHttpToolsProtocol`). The body's own deadline
  is app/edge.py's.
- a client must take its answer: while more is waiting to be sent than the socket holds, a client that
  takes less than :data:`MIN_SEND_BYTES` of it in ``SKILLGATE_SEND_TIMEOUT_S`` has its connection
  aborted (uvicorn's sends would wait on it for ever, the call holding its place, its upstream and its
  buffers). The application sees a disconnect: a stream is closed and billed as cut.

Why uvicorn and not a compiled server (issue 42): ``python -m bench.gateway_overhead.stacks`` measured
granian against this server, the same apps pinned to one core. Its ASGI path was not consistently cheaper
per call (a Python app keeps paying its Python), and it keeps neither head rule: a head that never ends
is closed with no 408, and a head past the bound is served (bench/results/gateway_overhead_stacks.md).

One more difference from uvicorn (issue 42): a response's head goes out in the same socket write as its
first body (:class:`HeadWithBody`), so a JSON answer costs one write, not two.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import logging
import resource
import socket
from collections.abc import Callable, Sequence
from typing import Any

import uvicorn
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from app.edge import error_response, response_head
from routing import conf

MAX_HEADER_BYTES = 64 * 1024
# What a client paused on must take of its answer in each SKILLGATE_SEND_TIMEOUT_S (uvloop's low-water
# mark: what resumes writing), or its connection is aborted.
MIN_SEND_BYTES = 16 * 1024
# Descriptors kept for everything but client connections (the database, upstreams, verifier workers, the
# journal): past the soft RLIMIT_NOFILE less these, the longest-waiting idle connections are closed.
FILES_RESERVED = 256

log = logging.getLogger(__name__)


class HeadWithBody(asyncio.Transport):
    """A connection's transport as its requests' cycles see it: the first write of each response (the
    head that uvicorn's ``RequestResponseCycle`` writes on ``http.response.start``) is held and goes out
    with the next write (the first body: one ``writelines``, one ``writev`` on uvloop), or alone at the
    event loop's next turn (``loop.call_soon``) when no write follows before control returns to the loop.

    So an application that sends its head and body in one go (Django's handler, a replayed stream)
    pays one socket write instead of two, and one that sends its head and then waits (a stream waiting
    on its upstream) has its head on the wire at once, before the wait: holding is bounded by the
    current turn of the loop, never by the application. Everything else is uvicorn's own cycle over
    this transport, unchanged: Content-Length and chunked framing, HEAD (no body write: the head goes
    alone), an empty first body (written as the head alone), ``Connection: close`` and the close at the
    end (``close`` writes what is held first), flow control (the cycle waits on the connection's flow
    before each send; what is held is one head), and a send after a disconnect (the cycle writes
    nothing; a held head is dropped if the connection is closing). A ``100 Continue`` that ``receive``
    writes is then the first write: it is held to the next turn (or goes with the head), and the head
    follows it unheld. Writes keep their order: each goes after what is held, and the protocol flushes
    a held head before it writes anything of its own (a 400, 408 or 431), so the wire sees uvicorn's.
    """

    __slots__ = ("_held", "_hold", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._hold = False

    def hold_next(self) -> None:
        """A response starts (its cycle's task is created): hold its first write."""
        self._hold = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.writelines((held, data))
        elif self._hold:
            self._hold = False
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()


def header_timeout_s() -> float:
    """Read per connection, after uvicorn loaded the app (so Django's settings are set up)."""
    return conf.get().limits.body_read_timeout_s


def send_timeout_s() -> float:
    return conf.get().limits.send_timeout_s


class HeadTooLarge(Exception):
    """Raised in a parser callback: the head passed MAX_HEADER_BYTES (answered 431 already)."""


class DeadlineHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size bound on each request's headers, a
    deadline on a client that does not take its answer, and responses that write their head with their
    first body (:class:`HeadWithBody`)."""

    _header_timer: asyncio.TimerHandle | None = None
    _send_timer: asyncio.TimerHandle | None = None
    _send_left = 0  # bytes waiting to be sent at the last look, while writing is paused
    _header_bytes = 0
    _wire_bytes = 0
    _headers_pending = False
    _out: HeadWithBody

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._out = HeadWithBody(transport, self.loop)
        self._await_headers()
        _idle[self] = None
        self._make_room()

    def _make_room(self) -> None:
        """Near the file limit, closes the connections that have waited longest with no request in
        progress (a 408, as their head deadline would): 1,100 connections that sent nothing took
        every descriptor, and ``accept`` failed for everyone else until they timed out (h37's probe)."""
        excess = len(self.connections) - len(_closed) - connection_limit()
        for oldest in list(itertools.islice(_idle, max(0, excess))):
            if oldest is not self:
                _idle.pop(oldest, None)
                _closed.add(oldest)  # until its connection_lost: counted as gone
                oldest._refuse(408, "Request Timeout", "not sent before the server needed the place")

    def data_received(self, data: bytes) -> None:
        # Two counts: the bytes on the wire, for a head still arriving (the parser buffers a header until
        # it ends), and, in on_url/on_header, the parsed head, for one that arrives whole in one read (its
        # headers complete inside this feed, and the app would be called before a count after it).
        if self._headers_pending:
            self._wire_bytes += len(data)
        super().data_received(data)
        if self._headers_pending and self._wire_bytes > MAX_HEADER_BYTES:
            self._too_large()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url) + 16)  # the request line: method, URL, version
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def send_400_response(self, msg: str) -> None:
        if self.transport.is_closing():
            return  # the 431 (or 408) answered already; the parser's stop is not a second answer
        self._flush_head()
        super().send_400_response(msg)

    def _count_head(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > MAX_HEADER_BYTES:
            self._too_large()
            raise HeadTooLarge  # stops the parser (httptools: a callback error) before the app runs

    def _too_large(self) -> None:
        self._refuse(431, "Request Header Fields Too Large", f"over {MAX_HEADER_BYTES} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._headers_pending:
            self._await_headers()

    def on_headers_complete(self) -> None:
        self._headers_pending = False
        _idle.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        cycle = self.cycle
        super().on_headers_complete()
        if self.cycle is not cycle:  # a new request (not an upgrade): its task has not run yet
            self.cycle.transport = self._out

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        # Every response's task starts here: at once, or, pipelined, when the one before it completed.
        self._out.hold_next()
        super()._start_asgi_task(cycle, app)

    def _flush_head(self) -> None:
        """Writes a response head still held (this turn of the loop) before the protocol writes."""
        self._out.flush()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            _idle[self] = None  # keep-alive: idle until its next head arrives whole

    def connection_lost(self, exc: Exception | None) -> None:
        _idle.pop(self, None)
        _closed.discard(self)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self._stop_send_watch()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        """More is waiting than the socket takes (the transport's high-water mark): the client has
        SKILLGATE_SEND_TIMEOUT_S to take each MIN_SEND_BYTES of it."""
        super().pause_writing()
        if self._send_timer is None:
            self._watch_send()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stop_send_watch()

    def _watch_send(self) -> None:
        self._send_left = self.transport.get_write_buffer_size()
        self._send_timer = self.loop.call_later(send_timeout_s(), self._send_due)

    def _stop_send_watch(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_due(self) -> None:
        self._send_timer = None
        left = self.transport.get_write_buffer_size()
        if self._send_left - left >= MIN_SEND_BYTES:
            self._watch_send()  # the client is taking it: another period
            return
        log.info(
            "a client took %d bytes of its answer in %g s: connection aborted",
            self._send_left - left,
            send_timeout_s(),
        )
        # Also when closing already (Connection: close, the keep-alive timeout): close() waits for the
        # buffer to drain, which is what never happens.
        self._out.abort()

    def _await_headers(self) -> None:
        self._headers_pending = True
        self._header_bytes = self._wire_bytes = 0
        timeout = header_timeout_s()
        self._header_timer = self.loop.call_later(timeout, self._headers_late, timeout)

    def _headers_late(self, timeout: float) -> None:
        self._header_timer = None
        if self._headers_pending:
            self._refuse(408, "Request Timeout", f"not complete within {timeout:g} s")

    def _refuse(self, status: int, reason: str, why: str) -> None:
        """Answers in the path's error convention (when the request line got that far) and closes."""
        if self.transport.is_closing():
            return
        self._headers_pending = False
        url: bytes = getattr(self, "url", b"") or b""
        path = url.split(b"?", 1)[0].decode("latin-1")
        code = "request_timeout" if status == 408 else "headers_too_large"
        content_type, body = error_response(path, f"The request headers were {why}.", code)
        self._flush_head()
        head = [f"HTTP/1.1 {status} {reason}".encode()]
        head += [name + b": " + value for name, value in response_head(content_type, body)]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()


# The process's connections with no request in progress, longest waiting first (dicts keep order).
_idle: dict[DeadlineHttpToolsProtocol, None] = {}
_closed: set[DeadlineHttpToolsProtocol] = set()  # closed for room, not yet lost


@functools.cache
def connection_limit() -> int:
    """How many client connections one process keeps open: its soft file limit less FILES_RESERVED."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 30 if soft == resource.RLIM_INFINITY else max(64, soft - FILES_RESERVED)


def raise_file_limit() -> None:
    """Raises the soft RLIMIT_NOFILE to the hard limit (at most 2^20): the default soft 1,024 is few
    connections for a gateway, and the hard limit is what the operator allowed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    connection_limit.cache_clear()


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    return sock


APP = "app.asgi:application"


def config(
    *,
    app: str | Callable[..., Any] = APP,
    backlog: int = 2048,
    timeout_graceful_shutdown: int = 25,
    http: type[DeadlineHttpToolsProtocol] = DeadlineHttpToolsProtocol,
    **extra: Any,
) -> uvicorn.Config:
    """The uvicorn configuration every web process runs with (tests start it the same way; ``http``: a
    subclass of the protocol, for a test that watches it)."""
    return uvicorn.Config(
        app,
        loop="uvloop",
        access_log=False,
        backlog=backlog,
        timeout_graceful_shutdown=timeout_graceful_shutdown,
        proxy_headers=False,  # forwarded headers: app/edge.py, from SKILLGATE_TRUSTED_PROXIES only
        http=http,
        **extra,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--app", default=APP, help="the ASGI application (the benchmark's floors use this)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--backlog", type=int, default=2048)
    parser.add_argument("--timeout-graceful-shutdown", type=int, default=25)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    raise_file_limit()
    server = uvicorn.Server(
        config(
            app=args.app,
            backlog=args.backlog,
            timeout_graceful_shutdown=args.timeout_graceful_shutdown,
            log_level=args.log_level,
        )
    )
    server.run(sockets=[listening_socket(args.host, args.port, args.backlog)])


if __name__ == "__main__":
    main()
