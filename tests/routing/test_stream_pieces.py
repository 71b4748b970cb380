"""How a stream's events are written to the client (issue 42, the CPU of a streamed call): what arrived
in one read of the upstream goes out in one write (one HTTP chunk), the first read's at once, without
waiting for more; ``[DONE]`` ends the response in its own write; an answer replayed whole is the head
and one write with its length. Through the running server (app/serve.py's uvicorn), with an upstream
whose writes the test controls, read off the socket chunk by chunk."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from routing.api.http import StreamResponse, send_stream
from routing.call.pieces import Last
from routing.call.sse import EventTooLarge, batches_of
from routing.models import Backend, Invocation
from tests.factories import TaskProfileFactory
from tests.support.gateway import GOOD, SCHEMA, by_model

pytestmark = pytest.mark.django_db(transaction=True)

HEAD = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 0, "model": "teacher-model"}
WORDS = ["one ", "two ", "three "]


def event(**fields: Any) -> bytes:
    return b"data: " + json.dumps({**HEAD, **fields}).encode() + b"\n\n"


class Burst(BaseHTTPRequestHandler):
    """A streamed answer in two writes: the role chunk, then (once the test lets it go) every other
    event and ``[DONE]`` together."""

    protocol_version = "HTTP/1.0"
    go = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(event(choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}}]))
        self.wfile.flush()
        self.go.wait(20)
        rest = [event(choices=[{"index": 0, "delta": {"content": word}}]) for word in WORDS]
        rest.append(event(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        rest.append(event(choices=[], usage={"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}))
        self.wfile.write(b"".join([*rest, b"data: [DONE]\n\n"]))
        self.wfile.flush()

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def burst(backends: dict[str, Backend]) -> Iterator[threading.Event]:
    Burst.go = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Burst)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Backend.objects.update(api_base=f"http://127.0.0.1:{server.server_address[1]}/v1")
    yield Burst.go
    Burst.go.set()
    server.shutdown()
    server.server_close()


class Chunks:
    """An HTTP/1.1 response read off a socket: its head, then its body one chunk (one write) at a time."""

    def __init__(self, gateway_url: str, key: str, body: dict[str, Any]) -> None:
        host, port = gateway_url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        payload = json.dumps(body).encode()
        self.sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
            + f"authorization: Bearer {key}\r\ncontent-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        self.buffer = b""
        head = self._until(b"\r\n\r\n").decode("latin-1").lower().split("\r\n")
        self.status = head[0]
        self.headers = dict(line.split(": ", 1) for line in head[1:])

    def _until(self, mark: bytes) -> bytes:
        while mark not in self.buffer:
            more = self.sock.recv(65536)
            assert more, "the connection closed early"
            self.buffer += more
        found, self.buffer = self.buffer.split(mark, 1)
        return found

    def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            more = self.sock.recv(65536)
            assert more, "the connection closed early"
            self.buffer += more
        found, self.buffer = self.buffer[:size], self.buffer[size:]
        return found

    def chunk(self) -> bytes:
        size = int(self._until(b"\r\n"), 16)
        data = self.exactly(size)
        if size:
            assert self.exactly(2) == b"\r\n"
        return data

    def close(self) -> None:
        self.sock.close()


def test_what_arrives_together_is_written_together_and_the_first_piece_at_once(
    gateway_url, backends, api_key, burst
):
    request = {"model": "auto", "messages": [{"role": "user", "content": "count"}], "stream": True}
    response = Chunks(gateway_url, api_key.raw, {**request, "stream_options": {"include_usage": True}})
    try:
        assert response.status.endswith("200 ok") and response.headers["transfer-encoding"] == "chunked"
        first = response.chunk()  # read while the upstream still holds back the rest
        burst.set()
        rest = []
        while piece := response.chunk():
            rest.append(piece)
    finally:
        response.close()
    assert first.count(b"data: ") == 1 and b'"role":"assistant"' in first.replace(b" ", b"")
    together, done = rest
    events = [json.loads(line[6:]) for line in together.split(b"\n\n") if line]
    assert [e["choices"][0]["delta"]["content"] for e in events[:3]] == WORDS
    assert events[3]["choices"][0]["finish_reason"] == "stop" and events[4]["usage"]["completion_tokens"] == 3
    assert {e["id"] for e in events} == {f"chatcmpl-{Invocation.objects.get().id.hex}"}
    assert done == b"data: [DONE]\n\n"
    row = Invocation.objects.get()
    assert row.response["message"]["content"] == "".join(WORDS) and row.completion_tokens == 3


def test_an_answer_replayed_whole_is_one_write_with_its_length(gateway_url, backends, api_key, stub):
    TaskProfileFactory.create(name="extract", verifier={"kind": "json_schema", "schema": SCHEMA})
    stub.responder = by_model(student=GOOD, teacher="unused")
    request = {"model": "auto", "messages": [{"role": "user", "content": "Paris"}], "stream": True}
    response = Chunks(gateway_url, api_key.raw, {**request, "metadata": {"task": "extract"}})
    try:
        assert (
            response.headers["x-skillgate-verdict"] == "pass" and "transfer-encoding" not in response.headers
        )
        body = response.exactly(int(response.headers["content-length"]))
    finally:
        response.close()
    assert body.endswith(b"data: [DONE]\n\n")
    text = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in body.split(b"\n\n")
        if line.startswith(b"data: {")
    )
    assert json.loads(text) == json.loads(GOOD)
    assert Invocation.objects.get().served_by == "student"


def test_a_last_piece_ends_the_response_in_its_own_message():
    sent: list[dict[str, Any]] = []
    hung_up = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await hung_up.wait()
        return {"type": "http.disconnect"}

    async def body() -> AsyncIterator[bytes]:
        yield b"data: a\n\n"
        yield Last(b"data: [DONE]\n\n")
        raise AssertionError("read past the last piece")

    asyncio.run(send_stream(send, receive, StreamResponse(body())))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "http.response.body"]
    assert (sent[1]["body"], sent[1]["more_body"]) == (b"data: a\n\n", True)
    assert sent[2]["body"] == b"data: [DONE]\n\n" and not sent[2].get("more_body", False)


def test_the_parser_groups_events_by_the_piece_that_completed_them():
    big = b"x" * 64

    async def pieces() -> AsyncIterator[bytes]:
        yield b"data: 1\n\ndata: 2\n\ndata: "
        yield b"3\n\n"
        yield b": comment\n\n"  # completes nothing
        yield b"data: 4\n\ndata: " + big + b"\n\n"

    async def read() -> tuple[list[list[bytes]], Exception | None]:
        got: list[list[bytes]] = []
        try:
            async for batch in batches_of(pieces()):
                got.append(batch)
        except EventTooLarge as exc:
            return got, exc
        return got, None

    assert asyncio.run(read()) == ([[b"1", b"2"], [b"3"], [b"4", big]], None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("routing.call.sse.MAX_EVENT_BYTES", 32)
        got, error = asyncio.run(read())
    assert got == [[b"1", b"2"], [b"3"], [b"4"]] and isinstance(error, EventTooLarge)
