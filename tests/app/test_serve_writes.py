"""app/serve.py's protocol writes a response's head with its first body (issue 42: one socket write per
small response, not two), and otherwise behaves as uvicorn: a head the application sends before it waits
is on the wire during the wait, and HEAD, chunked framing, an empty first body, Connection: close,
100-continue, pipelining, flow control and a send after a disconnect keep their behaviour. A real server
on a socket (app/serve.py's configuration), the protocol's transport wrapped to record each write it
makes, and a client reading the socket."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from app import serve
from app.asgi import application as skillgate
from bench.support.vllm import free_port
from tests.support.raw_http import head
from tests.support.wait import wait_until

WRITES: dict[int, list[bytes]] = {}  # client port -> what the server wrote to that connection, write by write
RELEASE = threading.Event()  # lets a waiting application go on
SEEN: dict[str, Any] = {}  # what an application saw (after a disconnect)
BIG = 4 * 1024 * 1024


class Recorded:
    """The connection's real transport, each write it is asked for recorded (``writelines`` is one
    ``writev`` on uvloop: one write)."""

    def __init__(self, transport: asyncio.Transport, log: list[bytes]) -> None:
        self._transport = transport
        self._log = log

    def write(self, data: bytes) -> None:
        if data:
            self._log.append(bytes(data))
        self._transport.write(data)

    def writelines(self, items: Any) -> None:
        items = [bytes(item) for item in items]
        self._log.append(b"".join(items))
        self._transport.writelines(items)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class RecordingProtocol(serve.DeadlineHttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        log = WRITES.setdefault(transport.get_extra_info("peername")[1], [])
        super().connection_made(Recorded(transport, log))  # type: ignore[arg-type]


async def wait_release() -> None:
    for _ in range(2000):
        if RELEASE.is_set():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("never released")


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    path = scope.get("path", "")
    if not path.startswith("/t/"):
        await skillgate(scope, receive, send)
        return
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
    if path == "/t/json":
        body = b'{"ok": true}'
        start["headers"] = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send(start)
        await send({"type": "http.response.body", "body": body})
    elif path == "/t/wait-stream":  # the head, then a wait (an upstream), then the events
        await send(start)
        await wait_release()
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/t/chunked":
        await send(start)
        await send({"type": "http.response.body", "body": b"abc", "more_body": True})
        await send({"type": "http.response.body", "body": b"def", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/t/empty-first":
        await send(start)
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        await wait_release()
        await send({"type": "http.response.body", "body": b"x"})
    elif path == "/t/echo":
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        start["headers"] = [(b"content-length", b"%d" % len(body))]
        await send(start)
        await send({"type": "http.response.body", "body": body})
    elif path == "/t/big":
        start["headers"] = [(b"content-length", b"%d" % BIG)]
        await send(start)
        await send({"type": "http.response.body", "body": b"b" * BIG})
    elif path == "/t/after-disconnect":
        await send(start)
        while (message := await receive())["type"] == "http.request":
            pass  # the request's (empty) body, then the client hangs up after the head
        SEEN["message"] = message
        try:
            await send({"type": "http.response.body", "body": b"late"})
            SEEN["sent"] = True
        except Exception as error:  # the test shows what it was
            SEEN["sent"] = error


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(
        serve.config(
            app=app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", http=RecordingProtocol
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=30, what="the server to start")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture(autouse=True)
def fresh() -> None:
    RELEASE.clear()
    SEEN.clear()


class Client:
    def __init__(self, url: str) -> None:
        port = int(url.rsplit(":", 1)[1])
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.port = self.sock.getsockname()[1]
        self.buffer = b""

    @property
    def writes(self) -> list[bytes]:
        return WRITES.get(self.port, [])

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _until(self, mark: bytes) -> bytes:
        while mark not in self.buffer:
            more = self.sock.recv(65536)
            assert more, f"closed early: {self.buffer!r}"
            self.buffer += more
        found, self.buffer = self.buffer.split(mark, 1)
        return found

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            more = self.sock.recv(1 << 20)
            assert more, "closed early"
            self.buffer += more
        found, self.buffer = self.buffer[:size], self.buffer[size:]
        return found

    def head(self) -> tuple[int, dict[str, str]]:
        status, *lines = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        return int(status.split()[1]), {
            k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)
        }

    def body(self, headers: dict[str, str]) -> bytes:
        if "content-length" in headers:
            return self._exactly(int(headers["content-length"]))
        assert headers.get("transfer-encoding") == "chunked", headers
        body = b""
        while size := int(self._until(b"\r\n"), 16):
            body += self._exactly(size)
            assert self._exactly(2) == b"\r\n"
        assert self._exactly(2) == b"\r\n"
        return body

    def response(self) -> tuple[int, dict[str, str], bytes]:
        status, headers = self.head()
        return status, headers, self.body(headers)

    def closed(self) -> bool:
        self.sock.settimeout(5)
        try:
            return self.buffer == b"" and self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def client(url: str) -> Iterator[Client]:
    made = Client(url)
    yield made
    made.close()


def get(path: str, *headers: str) -> bytes:
    return head("GET", path, *headers)


def one_write(client: Client, path: str, *headers: str) -> tuple[int, bytes]:
    """Status and body of one response, asserted to have cost the server exactly one write."""
    before = len(client.writes)
    client.send(get(path, *headers))
    status, _headers, body = client.response()
    assert len(client.writes) == before + 1, client.writes[before:]
    assert client.writes[-1].startswith(b"HTTP/1.1 %d" % status) and body in client.writes[-1]
    return status, body


def test_a_json_response_is_one_write_and_the_connection_serves_on(client):
    for _ in range(3):
        assert one_write(client, "/t/json") == (200, b'{"ok": true}')
    assert len(client.writes) == 3


def test_a_head_sent_before_a_wait_reaches_the_client_during_the_wait(client):
    client.send(get("/t/wait-stream"))
    status, headers = client.head()  # the application is still waiting (nothing released it)
    assert status == 200 and headers["transfer-encoding"] == "chunked" and not RELEASE.is_set()
    assert len(client.writes) == 1 and client.writes[0].endswith(b"\r\n\r\n")
    RELEASE.set()
    assert client.body(headers) == b"data: 1\n\n"
    assert client.writes[1:] == [b"9\r\ndata: 1\n\n\r\n", b"0\r\n\r\n"]


def test_skillgate_answers_json_in_one_write(client, api_key):
    assert one_write(client, "/healthz")[0] == 200  # Django's handler
    status, body = one_write(client, "/v1/models", f"Authorization: Bearer {api_key.raw}")  # the lean edge
    assert status == 200 and b'"data"' in body
    status, body = one_write(client, "/v1/models")  # an error, in the OpenAI convention
    assert status == 401 and b'"error"' in body


def test_head_requests_write_the_head_alone_and_keep_the_connection(client):
    client.send(head("HEAD", "/t/json"))
    status, headers = client.head()
    assert status == 200 and headers["content-length"] == "12"
    client.send(get("/t/json"))
    assert client.response()[2] == b'{"ok": true}'
    first, second = client.writes
    assert first.endswith(b"\r\n\r\n") and second.endswith(b'{"ok": true}')


def test_chunked_bodies_go_with_the_head_then_one_write_each(client):
    client.send(get("/t/chunked"))
    status, headers, body = client.response()
    assert (status, headers["transfer-encoding"], body) == (200, "chunked", b"abcdef")
    first, *rest = client.writes
    assert first.startswith(b"HTTP/1.1 200") and first.endswith(b"\r\n\r\n3\r\nabc\r\n")
    assert rest == [b"3\r\ndef\r\n", b"0\r\n\r\n"]


def test_an_empty_first_body_sends_the_head_alone_at_once(client):
    client.send(get("/t/empty-first"))
    status, headers = client.head()
    assert status == 200 and not RELEASE.is_set()
    RELEASE.set()
    assert client.body(headers) == b"x"
    assert len(client.writes) == 2 and client.writes[0].endswith(b"\r\n\r\n")


def test_connection_close_is_one_write_then_the_server_closes(client):
    client.send(get("/t/json", "Connection: close"))
    status, headers, body = client.response()
    assert status == 200 and headers["connection"] == "close" and body == b'{"ok": true}'
    assert client.closed() and len(client.writes) == 1


def test_expect_100_continue_answers_before_the_body_is_sent(client):
    client.send(head("POST", "/t/echo", "Content-Length: 5", "Expect: 100-continue"))
    assert client._until(b"\r\n\r\n") == b"HTTP/1.1 100 Continue"  # before the body was sent
    client.send(b"hello")
    assert client.response()[2] == b"hello"
    assert client.writes[0] == b"HTTP/1.1 100 Continue\r\n\r\n" and client.writes[-1].endswith(b"hello")


def test_pipelined_requests_are_answered_in_order(client):
    client.send(head("HEAD", "/t/json") + get("/t/chunked") + get("/t/json"))
    status, headers = client.head()
    assert status == 200 and headers["content-length"] == "12"
    assert client.response()[2] == b"abcdef"
    assert client.response()[2] == b'{"ok": true}'
    assert b"".join(client.writes).count(b"HTTP/1.1 200 OK") == 3


def test_a_body_past_the_write_buffer_arrives_whole_to_a_slow_reader(client):
    client.send(get("/t/big"))
    time.sleep(0.5)  # the server fills the socket and its buffer, and waits (flow control)
    status, _headers, body = client.response()
    assert status == 200 and len(body) == BIG and body == b"b" * BIG
    assert client.writes[0].startswith(b"HTTP/1.1 200") and client.writes[0].endswith(b"b" * BIG)


def test_a_send_after_the_client_left_writes_nothing(url, client):
    client.send(get("/t/after-disconnect"))
    assert client.head()[0] == 200
    client.close()
    wait_until(lambda: "sent" in SEEN, timeout=10, what="the application's send after the disconnect")
    assert SEEN == {"message": {"type": "http.disconnect"}, "sent": True}
    assert len(client.writes) == 1  # the head; nothing after the disconnect
    again = Client(url)
    try:
        again.send(get("/t/json"))
        assert again.response()[2] == b'{"ok": true}'  # the server serves on
    finally:
        again.close()
