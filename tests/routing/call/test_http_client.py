"""The upstream HTTP client (routing/call/http/) against real local servers: a caller that goes away
cancels the upstream request, timeouts say what they were and whether the attempt is billed, TLS is
verified (a self-signed CA is refused unless trusted), redirects are not followed, answers are capped,
and the environment's proxy is used."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.conf import settings
from django.test import override_settings

from bench.support.openai_stub import Reply
from routing.call import openai_client, sse, upstream
from routing.call.attempts import Attempts
from routing.call.http import exchange, pool
from routing.errors import UpstreamError
from routing.models import Backend
from tests.support.wait import wait_until

HELLO = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
COMPLETION = {
    "id": "c-1",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def backend(base_url: str, model: str = "hosted_vllm/m", **kw: Any) -> Backend:
    fields: dict[str, Any] = {"name": "b", "role": Backend.Role.TEACHER, "timeout_s": 5.0, **kw}
    return Backend(model=model, api_base=base_url, **fields)


class Server:
    """An aiohttp application on its own loop in a thread, over TLS when given a context."""

    def __init__(self, app: web.Application, tls: ssl.SSLContext | None = None) -> None:
        self.app, self.tls, self.port = app, tls, 0
        self._loop = asyncio.new_event_loop()
        started = threading.Event()

        def serve() -> None:
            runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True)
            self._loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.tls)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            started.set()
            self._loop.run_forever()
            self._loop.run_until_complete(runner.cleanup())

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        assert started.wait(10)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[Server] = []

    def start(routes: dict[str, Any], tls: ssl.SSLContext | None = None) -> Server:
        app = web.Application()
        for path, handler in routes.items():
            app.router.add_post(path, handler)
        servers.append(Server(app, tls))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(autouse=True)
def _fresh_pool_caches() -> Iterator[None]:
    yield
    pool.tls.cache_clear()
    pool.proxy_for.cache_clear()


# --- a caller that goes away ----------------------------------------------------------------------


def test_a_cancelled_whole_call_hangs_up_on_the_upstream(serve):
    outcomes: list[str] = []
    arrived = threading.Event()

    async def slow(request: web.Request) -> web.Response:
        arrived.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            outcomes.append("client gone")
            raise
        outcomes.append("answered")
        return web.json_response(COMPLETION)

    server = serve({"/v1/chat/completions": slow})

    async def call_then_hang_up() -> None:
        task = asyncio.ensure_future(upstream.complete(backend(f"http://127.0.0.1:{server.port}/v1"), HELLO))
        while not arrived.is_set():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.perf_counter()
    asyncio.run(call_then_hang_up())
    wait_until(lambda: outcomes, timeout=10, what="the upstream to see the hang-up")
    assert outcomes == ["client gone"] and time.perf_counter() - started < 15


# --- timeouts, and which attempts are billed -------------------------------------------------------


def test_a_read_timeout_is_billed_and_a_wait_for_a_connection_is_not(stub):
    stub.responder = lambda body: Reply(delay_s=1.5 if body["model"] == "slow" else 0)
    slow = backend(stub.base_url, "hosted_vllm/slow", timeout_s=10)
    hurried = backend(stub.base_url, "hosted_vllm/fast", timeout_s=0.3)

    async def calls() -> tuple[Attempts, UpstreamError, Attempts, UpstreamError]:
        waiting = Attempts()
        first = asyncio.ensure_future(upstream.complete(slow, HELLO))
        await asyncio.sleep(0.2)  # the only connection is the slow call's
        with pytest.raises(UpstreamError) as pooled:
            await upstream.complete(hurried, HELLO, attempts=waiting)
        await first
        read = Attempts()
        stub.responder = lambda body: Reply(delay_s=3)
        with pytest.raises(UpstreamError) as timed_out:
            await upstream.complete(hurried, HELLO, attempts=read)
        return waiting, pooled.value, read, timed_out.value

    one_connection = {**settings.SKILLGATE, "UPSTREAM_MAX_CONNECTIONS": 1}
    with override_settings(SKILLGATE=one_connection):
        waiting, pooled, read, timed_out = asyncio.run(calls())
    assert pooled.status == 504 and "timed out: ConnectTimeout" in pooled.message
    assert (waiting.sent, waiting.unmeasured) == (1, 0)  # nothing reached the upstream: free
    assert timed_out.status == 504 and "timed out: ReadTimeout (no answer within 0.3 s)" in timed_out.message
    assert (read.sent, read.unmeasured) == (1, 1)  # the upstream had it: charged its worst case


def test_the_pool_keeps_connections_alive_up_to_its_idle_bound(stub):
    stub.responder = lambda body: Reply(delay_s=0.3)

    async def idle_after(calls: int) -> tuple[int, int]:
        await asyncio.gather(*(upstream.complete(backend(stub.base_url), HELLO) for _ in range(calls)))
        connector = pool.session().connector
        assert connector is not None
        idle = sum(len(conns) for conns in connector._conns.values())  # type: ignore[attr-defined]
        await upstream.complete(backend(stub.base_url), HELLO)  # reuses one: no new connection
        return idle, sum(len(conns) for conns in connector._conns.values())  # type: ignore[attr-defined]

    assert asyncio.run(idle_after(4)) == (4, 4)
    # by default as many as were in flight: a peak of 150 calls opens no new connection after it (a
    # bound of 100 closed 50 at every peak and reopened them at the next: issue 42's churn at 256)
    assert asyncio.run(idle_after(150)) == (150, 150)
    with override_settings(SKILLGATE={**settings.SKILLGATE, "UPSTREAM_MAX_KEEPALIVE": 2}):
        assert asyncio.run(idle_after(4)) == (2, 2)


def test_a_refused_connection_is_not_billed():
    from bench.support.vllm import free_port

    attempts = Attempts()
    nowhere = backend(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(UpstreamError, match=r"failed \(ConnectError\)"):
        asyncio.run(upstream.complete(nowhere, HELLO, attempts=attempts))
    assert (attempts.sent, attempts.unmeasured) == (1, 0)


def test_a_stream_cut_mid_answer_is_billed_and_a_stalled_one_times_out(stub):
    stub.responder = lambda body: Reply(content="a b c d e f", cut_after=2)

    async def read(target: Backend) -> tuple[list[dict[str, Any]], UpstreamError]:
        got: list[dict[str, Any]] = []
        with pytest.raises(UpstreamError) as caught:
            async for chunk in await upstream.open_stream(target, HELLO):
                got.append(chunk)
        return got, caught.value

    got, cut = asyncio.run(read(backend(stub.base_url)))
    assert got and cut.status == 502 and "failed (" in cut.message
    stub.responder = lambda body: Reply(content="a b c", chunk_delay_s=2)
    got, stalled = asyncio.run(read(backend(stub.base_url, timeout_s=0.5)))
    assert got and stalled.status == 504 and "timed out: ReadTimeout" in stalled.message


def test_retries_wait_as_the_upstreams_retry_after_says(serve, monkeypatch):
    answers = iter(
        [
            web.json_response({"error": "slow down"}, status=429, headers={"Retry-After-Ms": "50"}),
            web.json_response({"error": "busy"}, status=503, headers={"Retry-After": "0.1"}),
            web.json_response(COMPLETION),
        ]
    )

    async def answer(request: web.Request) -> web.Response:
        return next(answers)

    waited: list[float] = []
    original = openai_client._retry_delay

    def recorded(headers: Any, retries_done: int) -> float:
        waited.append(original(headers, retries_done))
        return waited[-1]

    monkeypatch.setattr(openai_client, "_retry_delay", recorded)
    server = serve({"/v1/chat/completions": answer})
    attempts = Attempts()
    target = backend(f"http://127.0.0.1:{server.port}/v1", "openai/m")  # retried as the openai SDK did
    assert asyncio.run(upstream.complete(target, HELLO, attempts=attempts)).message["content"] == "ok"
    assert waited == [0.05, 0.1] and (attempts.sent, attempts.unmeasured) == (3, 1)  # the 503 is billed


# --- TLS ------------------------------------------------------------------------------------------


def _certificates(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA (its PEM written to ``folder``) and a server context whose certificate it signed for
    localhost and 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "skillgate test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return ca_file, context


def test_tls_to_an_untrusted_ca_is_refused_and_a_trusted_one_answers(serve, tmp_path, monkeypatch):
    async def answer(request: web.Request) -> web.Response:
        return web.json_response(COMPLETION)

    ca_file, context = _certificates(tmp_path)
    server = serve({"/v1/chat/completions": answer}, tls=context)
    target = backend(f"https://localhost:{server.port}/v1")
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    pool.tls.cache_clear()
    attempts = Attempts()
    with pytest.raises(UpstreamError, match=r"failed \(ConnectError\).*certificate"):
        asyncio.run(upstream.complete(target, HELLO, attempts=attempts))
    assert attempts.unmeasured == 0  # nothing was sent
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # the operator trusts this CA
    pool.tls.cache_clear()
    assert asyncio.run(upstream.complete(target, HELLO)).message["content"] == "ok"
    wrong_name = backend(f"https://127.0.0.2:{server.port}/v1")  # the certificate does not name it
    with pytest.raises(UpstreamError, match=r"failed \(ConnectError\)"):
        asyncio.run(upstream.complete(wrong_name, HELLO))


# --- redirects, sizes, proxies --------------------------------------------------------------------


def test_a_redirect_is_the_answer_not_followed(serve):
    followed: list[str] = []

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(f"http://127.0.0.1:{request.url.port}/elsewhere")

    async def elsewhere(request: web.Request) -> web.Response:
        followed.append(request.path)
        return web.json_response(COMPLETION)

    server = serve({"/v1/chat/completions": moved, "/elsewhere": elsewhere})
    with pytest.raises(UpstreamError, match=r"failed \(307\)"):
        asyncio.run(upstream.complete(backend(f"http://127.0.0.1:{server.port}/v1"), HELLO))
    assert followed == []


def test_an_answer_or_an_event_past_the_cap_is_refused(stub, monkeypatch):
    stub.responder = lambda body: Reply(content="word " * 200)
    monkeypatch.setattr(exchange, "MAX_RESPONSE_BYTES", 500)
    attempts = Attempts()
    with pytest.raises(UpstreamError, match=r"failed \(TooLarge\): the answer is over 500 bytes"):
        asyncio.run(upstream.complete(backend(stub.base_url), HELLO, attempts=attempts))
    assert attempts.unmeasured == 1  # the upstream answered: it was processed
    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", 300)
    stub.responder = lambda body: Reply(content="x" * 1000)

    async def read() -> None:
        async for _ in await upstream.open_stream(backend(stub.base_url), HELLO):
            pass

    with pytest.raises(UpstreamError, match="an event over 300 bytes"):
        asyncio.run(read())


def test_the_environments_proxy_is_used(serve, monkeypatch):
    seen: list[str] = []

    async def proxy(request: web.Request) -> web.Response:
        seen.append(str(request.url))
        return web.json_response(COMPLETION)

    server = serve({"/v1/chat/completions": proxy})
    for name in ("NO_PROXY", "no_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
    pool.proxy_for.cache_clear()
    target = backend("http://upstream.invalid/v1")  # reachable only through the proxy
    assert asyncio.run(upstream.complete(target, HELLO)).message["content"] == "ok"
    assert seen == ["http://upstream.invalid/v1/chat/completions"]
    monkeypatch.setenv("NO_PROXY", "upstream.invalid")
    pool.proxy_for.cache_clear()
    with pytest.raises(UpstreamError, match=r"failed \(ConnectError\)"):
        asyncio.run(upstream.complete(target, HELLO))
    assert len(seen) == 1


def test_a_url_without_a_scheme_is_refused_before_any_attempt():
    attempts = Attempts()
    with pytest.raises(UpstreamError, match=r"failed \(UnsupportedProtocol\)"):
        asyncio.run(upstream.complete(backend("127.0.0.1:9/v1"), HELLO, attempts=attempts))
    assert attempts.sent == 0  # refused before any attempt
