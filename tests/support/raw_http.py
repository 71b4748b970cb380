"""Raw HTTP/1.1 over a socket, for tests that must control what is sent and when (a head that never
ends, a body that never finishes), and a uvicorn server started the way app/serve.py starts it."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import uvicorn

from app import serve
from bench.support.vllm import free_port
from tests.support.wait import wait_until

Response = tuple[int, dict[str, str], bytes]


def connect(url: str, timeout: float = 10) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=timeout)


def head(method: str, path: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock: socket.socket) -> Response:
    """(status, headers, body) of one response with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the response body"
        body += chunk
    return int(status_line.split()[1]), headers, body


def closed(sock: socket.socket) -> bool:
    """Whether the server closed the connection (what is left to read ends at once)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def openai_error(response: Response) -> dict[str, Any]:
    error = json.loads(response[2])["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return dict(error)


@contextmanager
def served() -> Iterator[str]:
    """The app in a uvicorn server configured by app/serve.py (its protocol, no proxy-header trust), in
    a thread of this process, so it sees the test's settings and database."""
    port = free_port()
    server = uvicorn.Server(serve.config(host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(
        lambda: server.started,
        timeout=30,
        what="uvicorn (app.serve's configuration) to start",
        abort=lambda: None if thread.is_alive() else "uvicorn exited",
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
