"""The read cap's two parts on their own (fast): the stdio relay passes lines under the cap and kills
the server on the first line over it, and the HTTP transport refuses a body past the cap while it
streams (no Content-Length to refuse it by) or at once by its Content-Length, reading no further."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import httpx2
import pytest

from diagnostics.mcp import relay
from diagnostics.mcp.capped import BodyTooLarge, CappedTransport

CAP = 100_000


def _relay(program: str, cap: int = CAP) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-I", relay.__file__, str(cap), "--", sys.executable, "-c", program]
    return subprocess.run(command, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)


def test_the_relay_passes_lines_under_the_cap_and_the_servers_exit_status():
    done = _relay(f"import sys; print('a' * {CAP}); print('b'); sys.exit(4)")
    assert done.stdout == b"a" * CAP + b"\nb\n" and done.returncode == 4 and done.stderr == b""


def test_the_relay_kills_the_server_on_a_line_over_the_cap_and_says_why():
    program = f"import sys, time; sys.stdout.write('x' * {10 * CAP}); sys.stdout.flush(); time.sleep(60)"
    done = _relay(program)  # the server would sleep a minute: the relay ended it
    assert done.returncode == relay.TOO_LARGE_EXIT
    assert done.stderr.decode().startswith(f"too_large: over {CAP} bytes")
    assert len(done.stdout) <= CAP


def test_the_relay_counts_a_line_across_reads():
    program = "import sys\nfor _ in range(30): sys.stdout.write('y' * 10_000); sys.stdout.flush()\nprint()"
    assert _relay(program).returncode == relay.TOO_LARGE_EXIT
    assert _relay(program, cap=400_000).returncode == 0


@pytest.mark.parametrize(("count", "chunk"), [(8, 1), (1, 4096), (1_000_000, 1)])
def test_line_counting(count, chunk):
    data = b"z" * count + b"\n" * chunk
    assert (relay._count(0, data, CAP) > CAP) == (count > CAP)


class _Body(BaseHTTPRequestHandler):
    sent = 0

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.path == "/length":
            self.send_header("Content-Length", str(10 * CAP))
            self.end_headers()
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for _ in range(10_000):  # 80 MB unless the reader stops
                piece = b"w" * 8192
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                type(self).sent += len(piece)
        except OSError:
            return

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def body_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Body)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("path", ["/chunked", "/length"])
def test_the_http_transport_refuses_a_body_past_the_cap(body_url, path):
    capped = CappedTransport(CAP)

    async def read() -> None:
        async with httpx2.AsyncClient(transport=capped) as client:
            await client.get(body_url + path)

    with pytest.raises(BodyTooLarge):
        anyio.run(read)
    assert capped.refused and capped.bytes_read <= CAP + 64 * 1024
