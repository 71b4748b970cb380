"""Connections that never send a request cannot take the server's file descriptors (issue 37, class 5;
h37's probe: many connections with no key).

Each open connection holds a file descriptor of the serving process until its head deadline
(``SKILLGATE_BODY_READ_TIMEOUT_S``, 30 s). Under a soft ``RLIMIT_NOFILE`` of 1,024 (the usual default
outside containers), 1,100 connections that send nothing took every descriptor: ``accept`` failed with
EMFILE, and every other client, keyed or not, waited in the backlog for the head deadline (the probe
saw no answer within 10 s). Now ``python -m app.serve`` raises its soft limit to the hard one, and when
its connections near the limit it closes the connections that have waited longest without a request in
progress (a 408, as their deadline would), so a new client is served at once.
"""

from __future__ import annotations

import resource
import socket
import time

import httpx
import pytest

from tests.support.gateway_process import APP_SERVE, gateway_process
from tests.support.wall import bound

pytestmark = pytest.mark.django_db(transaction=True)

FILES = 1024


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, FILES))


def _healthz_seconds(url: str) -> float:
    started = time.monotonic()
    try:
        response = httpx.get(f"{url}/healthz", timeout=10)
    except httpx.TransportError:
        return float("inf")
    assert response.status_code == 200, response.text
    return time.monotonic() - started


def test_idle_connections_past_the_file_limit_leave_new_clients_served(tmp_path):
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FILES + 300:
        pytest.skip(f"this process may open only {soft} files")
    with gateway_process("few-files", tmp_path, serve=APP_SERVE, preexec_fn=_limit_files) as server:
        url = server.url
        port = int(url.rsplit(":", 1)[1])
        idle: list[socket.socket] = []
        try:
            for n in range(FILES + 100):
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                if n % 2:
                    sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # half a head, like slowloris
                idle.append(sock)
            time.sleep(0.5)
            slowest = max(_healthz_seconds(url) for _ in range(5))
            assert slowest < bound(1.0), (
                f"GET /healthz took {slowest:.2f} s with {len(idle)} idle connections"
            )
        finally:
            for sock in idle:
                sock.close()
