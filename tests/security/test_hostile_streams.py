"""A hostile upstream's stream costs the serving process no more than its bytes (issue 37, class 1).

An upstream's stream is parsed in the serving process (routing/call/sse.py). Its lines used to be
assembled by joining what had arrived so far to each new piece, so one long line sent in small pieces
cost the square of its length: a 4 MB line in 1 KB pieces was 10 s of CPU under the GIL. Through the
running server, with an upstream that sends one answer chunk of 4 MB a kilobyte at a time: the call
answers with the whole text, and ``GET /v1/models`` keeps answering within a second meanwhile (aiohttp
hands over what has arrived, so a fast reader sees small pieces only from a slow drip: the CPU burnt
then is spread thin); the parser itself, fed the pieces one by one, joins the line once.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from routing.call.sse import data_of
from routing.models import Backend
from tests.factories import make_key
from tests.support.liveness import models_keep_answering

pytestmark = pytest.mark.django_db(transaction=True)

PIECE = 1024
PIECES = 4000


class Trickler(BaseHTTPRequestHandler):
    """Answers a streamed chat call with one content chunk of ``PIECES`` kilobytes, a piece at a time."""

    protocol_version = "HTTP/1.0"

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        head = {"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 0, "model": "t"}
        opening = json.dumps({**head, "choices": [{"index": 0, "delta": {"content": "<>"}}]})
        start, end = opening.split("<>")
        self.wfile.write(f"data: {start}".encode())
        for _ in range(PIECES):
            self.wfile.write(b"a" * PIECE)
            self.wfile.flush()
            time.sleep(0.0005)  # each piece reaches the gateway on its own
        self.wfile.write(f"{end}\n\n".encode())
        stop = {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        usage = {**head, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}
        self.wfile.write(
            f"data: {json.dumps(stop)}\n\ndata: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode()
        )

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def trickler(backends: dict[str, Backend]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Backend.objects.update(api_base=f"http://127.0.0.1:{server.server_address[1]}/v1")
    yield "trickler"
    server.shutdown()
    server.server_close()


def test_a_long_line_in_small_pieces_costs_no_more_than_its_bytes(gateway_url, backends, trickler):
    key = make_key().raw
    request = {
        "model": "auto",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 20,
        "stream": True,
    }
    with (
        models_keep_answering(gateway_url, key),
        httpx.stream(
            "POST",
            f"{gateway_url}/v1/chat/completions",
            json=request,
            headers={"authorization": f"Bearer {key}"},
            timeout=120,
        ) as response,
    ):
        assert response.status_code == 200
        body = b"".join(response.iter_bytes())
    text = "".join(
        choice["delta"].get("content") or ""
        for line in body.split(b"\n\n")
        if line.startswith(b"data: {")
        for choice in json.loads(line[6:])["choices"]
    )
    assert text == "a" * (PIECE * PIECES)


def test_the_parser_joins_a_line_once_however_many_pieces_it_arrives_in():
    async def pieces() -> AsyncIterator[bytes]:
        yield b'data: {"x": "'
        for _ in range(PIECES):
            yield b"a" * PIECE
        yield b'"}\n\ndata: [DONE]\n\n'

    async def read() -> list[bytes]:
        return [data async for data in data_of(pieces())]

    started = time.process_time()
    [event] = asyncio.run(read())
    assert len(event) == PIECE * PIECES + 9
    assert time.process_time() - started < 1.0  # joined at each piece: 10 s here
