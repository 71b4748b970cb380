"""Slow clients hold nothing past a deadline (issue 37, class 5, round three's probes).

Three ways to be slow, each driven with raw sockets against the server app/serve.py configures:
- slowloris: a head trickled a byte at a time, each byte well inside any idle timeout;
- a body trickled a byte at a time under a valid key (so it takes a place under MAX_IN_FLIGHT);
- a reader that asks for a large answer (a stream, or one JSON body) and never reads it: the server's
  sends wait on the socket, so the call would keep its place, its upstream and its buffers.
Each must be cut at its stated deadline (SKILLGATE_BODY_READ_TIMEOUT_S for what the client sends,
SKILLGATE_SEND_TIMEOUT_S for what it will not take), give its place back, and leave every other
caller served meanwhile; a stream cut that way is still billed.
"""

from __future__ import annotations

import array
import fcntl
import socket
import termios
import time
from collections.abc import Iterator

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.api import inflight
from routing.models import Invocation
from tests.support.liveness import models_keep_answering
from tests.support.raw_http import closed, connect, head, openai_error, read_response, served
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
TIMEOUT_S = 1.0  # SKILLGATE_BODY_READ_TIMEOUT_S and SKILLGATE_SEND_TIMEOUT_S in these tests
BIG_WORD = "x" * 8192
BIG_ANSWER = " ".join([BIG_WORD] * 2000)  # about 16 MB of answer: far past every socket buffer


@pytest.fixture
def tight(settings) -> None:
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "MAX_IN_FLIGHT": 1,
        "BODY_READ_TIMEOUT_S": TIMEOUT_S,
        "SEND_TIMEOUT_S": TIMEOUT_S,
        "MAX_BODY_BYTES": 32 * 1024 * 1024,
    }
    wait_until(lambda: inflight.in_flight() == 0, timeout=10, what="no call in flight")


@pytest.fixture(scope="module")
def served_url() -> Iterator[str]:
    with served() as url:
        yield url


def chat(url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions", json=HELLO, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def trickle(sock: socket.socket, data: bytes, every_s: float, until_s: float) -> tuple[bool, float]:
    """Sends ``data`` a byte at a time until the server cuts the connection or ``until_s`` passes:
    (whether it was cut, seconds taken)."""
    started = time.monotonic()
    for byte in data:
        if time.monotonic() - started > until_s:
            return False, time.monotonic() - started
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return True, time.monotonic() - started
        time.sleep(every_s)
        sock.setblocking(False)
        try:
            if sock.recv(65536, socket.MSG_PEEK):
                return True, time.monotonic() - started  # the server answered (its 408) mid-trickle
        except BlockingIOError:
            pass
        except OSError:
            return True, time.monotonic() - started
        finally:
            sock.setblocking(True)
    return False, time.monotonic() - started


def test_a_head_trickled_byte_by_byte_is_cut_at_the_deadline(served_url, backends, api_key, tight):
    # The probe first: its entry collects the test process's garbage (seconds, deep in a full run), and a
    # connection opened before it would sit idle past the head's deadline and get its 408 before a byte.
    with models_keep_answering(served_url, api_key.raw), connect(served_url, timeout=TIMEOUT_S + 5) as sock:
        request = head("GET", "/v1/models", f"Authorization: Bearer {api_key.raw}", "X-Pad: " + "a" * 200)
        line = request.index(b"\r\n") + 2
        started = time.monotonic()
        sock.sendall(request[:line])  # the request line at once (so the 408 is in /v1's shape), then
        cut, _ = trickle(sock, request[line:], every_s=0.05, until_s=TIMEOUT_S + 3)  # a header byte at a time
        took = time.monotonic() - started
        assert cut and took < TIMEOUT_S + 1.5, took
        response = read_response(sock)
        assert response[0] == 408 and openai_error(response)["code"] == "request_timeout"
        assert closed(sock)


def test_a_body_trickled_byte_by_byte_holds_no_place_and_is_cut_at_the_deadline(
    served_url, backends, api_key, stub, tight
):
    body = b'{"model": "auto", "messages": [{"role": "user", "content": "' + b"a" * 500 + b'"}]}'
    # The probe first: its entry collects the test process's garbage (seconds, deep in a full run), and a
    # connection opened before it would sit idle past the head's deadline and get its 408 before a byte.
    with models_keep_answering(served_url, api_key.raw), connect(served_url, timeout=TIMEOUT_S + 5) as sock:
        sock.sendall(
            head(
                "POST",
                "/v1/chat/completions",
                f"Authorization: Bearer {api_key.raw}",
                "Content-Type: application/json",
                f"Content-Length: {len(body)}",
            )
        )
        started = time.monotonic()
        cut, _ = trickle(sock, body[:8], every_s=0.05, until_s=TIMEOUT_S + 3)
        assert not cut and inflight.in_flight() == 0  # its body has not arrived: it holds no place
        assert chat(served_url, api_key.raw).status_code == 200  # so the one place serves another caller
        cut, _ = trickle(sock, body[8:], every_s=0.05, until_s=TIMEOUT_S + 3)
        took = time.monotonic() - started
        assert cut and took < TIMEOUT_S + 1.5, took
        response = read_response(sock)
        assert response[0] == 408 and openai_error(response)["code"] == "request_timeout"
    wait_until(lambda: inflight.in_flight() == 0, timeout=5, what="no place held")
    assert len(stub.requests) == 1  # the ordinary call's: nothing of the trickled one reached the upstream
    assert chat(served_url, api_key.raw).status_code == 200


def never_reading(url: str, key: str, body: bytes, *headers: str) -> socket.socket:
    """A connection with a small receive buffer that sends ``body`` and never reads a byte."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = url.removeprefix("http://").split(":")
    sock.connect((host, int(port)))
    sock.sendall(
        head(
            "POST",
            "/v1/chat/completions",
            f"Authorization: Bearer {key}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            *headers,
        )
        + body
    )
    return sock


def queued(sock: socket.socket) -> int:
    """Bytes of the answer waiting, unread, in the client's receive buffer."""
    count = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, count)
    return count[0]


@pytest.mark.parametrize(
    ("stream", "headers"),
    [(True, ()), (False, ()), (False, ("Connection: close",))],
    ids=["stream", "json", "json-then-close"],
)
def test_a_reader_that_never_reads_a_large_answer_is_cut_and_gives_its_place_back(
    served_url, backends, api_key, stub, tight, stream, headers
):
    stub.responder = lambda body: Reply(content=BIG_ANSWER)
    request = {**HELLO, "max_tokens": 100_000, "stream": stream}
    body = httpx.Request("POST", "http://x", json=request).content
    with (
        never_reading(served_url, api_key.raw, body, *headers) as sock,
        models_keep_answering(served_url, api_key.raw),
    ):
        wait_until(lambda: len(stub.requests) == 1, timeout=10, what="the call to reach the upstream")
        # The deadline runs from when the server starts sending and the client's buffer is full, not from
        # the upstream call: on a loaded machine the gateway may take seconds to read and check 16 MB first,
        # and a client that began reading by then would take the whole answer in time (no cut is due).
        wait_until(lambda: queued(sock) > 0, timeout=60, what="the answer to start arriving")
        started = time.monotonic()
        if stream:
            wait_until(lambda: inflight.in_flight() == 0, timeout=TIMEOUT_S + 5, what="the place back")
            assert time.monotonic() - started < TIMEOUT_S + 3
        # The server gives up on the connection: the client finds it reset (or ended) after its buffer.
        sock.settimeout(TIMEOUT_S + 10)
        total, cut = 0, False
        time.sleep(TIMEOUT_S + 1.5)
        try:
            while chunk := sock.recv(1 << 20):
                total += len(chunk)
        except ConnectionResetError:
            cut = True
        except TimeoutError:
            pytest.fail(f"the server still held the connection after {TIMEOUT_S + 11:g} s")
        assert cut or total < len(BIG_ANSWER), total
    assert inflight.in_flight() == 0
    assert chat(served_url, api_key.raw).status_code == 200
    rows = wait_until(
        lambda: Invocation.objects.count() == 2 and Invocation.objects.all(), timeout=20, what="rows"
    )
    assert rows
    first = Invocation.objects.order_by("created_at").first()
    assert first is not None and first.cost_usd > 0
