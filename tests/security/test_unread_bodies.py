"""A body the app never reads cannot hold its connection (issue 37, class 5, round three).

A request answered without its body being read (``GET /v1/models`` with a chunked body, with or without
a key) left the connection open after the response: uvicorn discards the rest of that body as it
arrives, and each arrival cancels the 5 s keep-alive timer, while the body's deadline (app/edge.py)
only runs while the app reads. One chunk every second held the connection for as long as the client
liked, past every deadline, and any number of such connections could be held by callers with no key.
Now a response sent before its request's body was read says ``Connection: close`` and the server
closes the connection after it. Driven through the server as app/serve.py configures it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.raw_http import connect, head, read_response, served

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT_S = 1.0  # SKILLGATE_BODY_READ_TIMEOUT_S in these tests


@pytest.fixture(scope="module")
def served_url() -> Iterator[str]:
    with served() as url:
        yield url


@pytest.fixture
def tight(settings) -> None:
    settings.SKILLGATE = {**settings.SKILLGATE, "MAX_IN_FLIGHT": 1, "BODY_READ_TIMEOUT_S": TIMEOUT_S}


def models_quickly(url: str, key: str) -> None:
    started = time.monotonic()
    response = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=5)
    assert response.status_code == 200 and time.monotonic() - started < 1


def trickles_until_closed(sock, seconds: float) -> float | None:
    """Sends a 1-byte chunk each second; how long until the server closed the connection (None: not
    within ``seconds``)."""
    started = time.monotonic()
    sock.settimeout(0.05)
    while time.monotonic() - started < seconds:
        try:
            sock.sendall(b"1\r\nx\r\n")
            if sock.recv(100) == b"":
                return time.monotonic() - started
        except TimeoutError:
            pass
        except OSError:
            return time.monotonic() - started
        time.sleep(1)
    return None


@pytest.mark.parametrize(
    ("framing", "auth"),
    [
        ("Transfer-Encoding: chunked", False),
        ("Transfer-Encoding: chunked", True),
        ("Content-Length: 100000", False),
    ],
    ids=["chunked-no-key", "chunked-with-key", "declared-length-no-key"],
)
def test_a_body_answered_unread_does_not_keep_its_connection(
    served_url, backends, api_key, tight, framing, auth
):
    key = (f"Authorization: Bearer {api_key.raw}",) if auth else ()
    with connect(served_url, timeout=10) as sock:
        sock.sendall(head("GET", "/v1/models", framing, *key))
        status, headers, _body = read_response(sock)
        assert status == (200 if auth else 401)
        assert headers.get("connection") == "close"
        # Past the body deadline and uvicorn's 5 s keep-alive: the server has let the connection go.
        held = trickles_until_closed(sock, TIMEOUT_S + 6)
        assert held is not None and held < 2, f"held for {held} s"
        models_quickly(served_url, api_key.raw)


def test_a_request_without_a_body_keeps_its_connection_alive(served_url, backends, api_key, tight):
    with connect(served_url, timeout=10) as sock:
        for _ in range(2):  # keep-alive still serves a second request on the same connection
            sock.sendall(head("GET", "/v1/models", f"Authorization: Bearer {api_key.raw}"))
            status, headers, _body = read_response(sock)
            assert status == 200 and headers.get("connection") != "close"
