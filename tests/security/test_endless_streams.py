"""An upstream's stream that never ends is cut at what an honest one may send (issue 37, classes 1 and
6; round seven).

A whole answer was bounded (64 MiB) and one event of a stream (16 MiB), but not a stream as a whole: a
broken or hostile upstream that kept sending was relayed for as long as it liked, and the text of
every event was kept for the ledger row. Probed through ``python -m app.serve`` with a call of
``max_tokens`` 1,000: 2.7 GB relayed in 25 s, the server's memory 0.2 -> 3 GB, linearly, the call
holding its place and connection throughout. Now a stream is cut past 64 MiB plus 4 KiB per token of
the call's output cap, or 64 Mi characters of text (routing/call/stream_bounds.py): the client gets an
error event and ``[DONE]``, the upstream is hung up on, and the attempt is charged its bound.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from routing.call import stream_bounds
from routing.models import Backend, Invocation
from tests.support.gateway_process import APP_SERVE, gateway_process
from tests.support.liveness import models_keep_answering
from tests.support.wait import wait_until
from tests.support.wall import bound

pytestmark = pytest.mark.django_db(transaction=True)

MAX_TOKENS = 1000
SENDING_S = 30  # the upstream gives up after this long: without the bound the test would take this
HEAD = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "endless"}
EVENT = "data: " + json.dumps({**HEAD, "choices": [{"index": 0, "delta": {"content": "word " * 50_000}}]})


class Endless(BaseHTTPRequestHandler):
    """Answers a streamed chat call with 250 KB content events, one after another, until it is hung up
    on (or :data:`SENDING_S` passes)."""

    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        event = (EVENT + "\n\n").encode()
        started = time.monotonic()
        try:
            while time.monotonic() - started < SENDING_S:
                self.wfile.write(event)
        except OSError:
            pass


@pytest.fixture
def endless(backends: dict[str, Backend]) -> Iterator[None]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for backend in backends.values():
        backend.api_base = f"http://127.0.0.1:{server.server_address[1]}/v1"
        backend.save()
    yield
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("path", "extra"),
    [("/v1/chat/completions", {}), ("/v1/messages", {})],
)
def test_an_endless_stream_is_cut_and_charged_its_bound(endless, tmp_path, api_key, path, extra):
    """Through ``python -m app.serve`` in its own process, as a deployment runs it: the upstream and the
    client are this test's threads, and beside an in-process server their share of one GIL (64 MB read
    and written here) was what the liveness probe measured (3.2 s in the CI overlap), not the server."""
    body = {
        "model": "auto",
        "stream": True,
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": "hi"}],
    }
    limit = stream_bounds.byte_limit({"max_tokens": MAX_TOKENS})
    received = 0
    tail = b""
    headers = {"Authorization": f"Bearer {api_key.raw}"}
    with gateway_process("endless", tmp_path, serve=APP_SERVE) as server:
        started = time.monotonic()
        with (
            models_keep_answering(server.url, api_key.raw),
            httpx.stream(
                "POST", f"{server.url}{path}", json={**body, **extra}, headers=headers, timeout=60
            ) as answer,
        ):
            assert answer.status_code == 200
            for piece in answer.iter_bytes():
                received += len(piece)
                tail = (tail + piece)[-4096:]
        took = time.monotonic() - started
        assert received < limit * 1.2, f"{received} bytes relayed; the bound is {limit}"
        assert took < bound(SENDING_S / 2), f"the stream ran {took:.1f} s"
        assert b"a stream of more than" in tail
        row = wait_until(lambda: Invocation.objects.first(), timeout=30, what="the call's ledger row")
    assert row.cost_basis == Invocation.CostBasis.BOUND and row.cost_usd > 0
    assert row.verdict == Invocation.Verdict.ERROR or row.error


def test_text_counts_every_field_a_row_keeps():
    chunk = {
        "choices": [
            {
                "delta": {
                    "content": "abc",
                    "reasoning_content": "de",
                    "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}],
                }
            }
        ]
    }
    assert stream_bounds._text(chunk) == 8
    assert stream_bounds.output_cap({"max_completion_tokens": 7, "max_tokens": 9}) == 7
    assert stream_bounds.byte_limit({}) == stream_bounds.BASE_BYTES
