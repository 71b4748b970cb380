"""Capacity after authentication, and read deadlines (issue 37, class 5).

With SKILLGATE_MAX_IN_FLIGHT set, connections with no key that sent headers and never finished their
bodies held every place: the shedder counted a call before its key was known, and a body had no
deadline. Now the key (it is in the headers) is checked before the body is read and before a place is
taken; a body, and a head, slower than SKILLGATE_BODY_READ_TIMEOUT_S gets a 408 in its interface's
convention. Driven through the running server with raw sockets (the slow client) and httpx (everyone else).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from routing.api import inflight
from routing.models import Invocation
from tests.support.raw_http import closed, connect, head, openai_error, read_response, served
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
TIMEOUT_S = 1.0  # SKILLGATE_BODY_READ_TIMEOUT_S in these tests


@pytest.fixture
def tight(settings) -> None:
    settings.SKILLGATE = {**settings.SKILLGATE, "MAX_IN_FLIGHT": 1, "BODY_READ_TIMEOUT_S": TIMEOUT_S}
    wait_until(lambda: inflight.in_flight() == 0, timeout=10, what="no call in flight")


@pytest.fixture(scope="module")
def served_url() -> Iterator[str]:
    with served() as url:
        yield url


def chat(url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions", json=HELLO, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def models_quickly(url: str, key: str) -> None:
    started = time.monotonic()
    response = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=5)
    assert response.status_code == 200 and time.monotonic() - started < 1


def unfinished(url: str, path: str, *headers: str):
    """A connection that sent its head and 10 of the 1000 body bytes it announced, and then nothing."""
    sock = connect(url, timeout=TIMEOUT_S + 4)
    sock.sendall(head("POST", path, "Content-Type: application/json", "Content-Length: 1000", *headers))
    sock.sendall(b'{"model": ')
    return sock


@pytest.mark.parametrize(
    ("path", "auth"),
    [
        ("/v1/chat/completions", ()),
        ("/v1/chat/completions", ("Authorization: Bearer sk-sg-not-a-real-key",)),
        ("/v1/responses", ()),
        ("/v1/embeddings", ()),
    ],
    ids=["no key", "wrong key", "responses", "embeddings"],
)
def test_connections_without_a_valid_key_take_no_place_and_their_body_is_never_awaited(
    gateway_url, backends, api_key, stub, tight, path, auth
):
    assert chat(gateway_url, api_key.raw).status_code == 200  # warm: a fresh server loads litellm
    stub.requests.clear()
    socks = [unfinished(gateway_url, path, *auth) for _ in range(3)]
    try:
        for sock in socks:  # each is answered at once, from its headers, and the connection ends
            started = time.monotonic()
            response = read_response(sock)
            assert time.monotonic() - started < TIMEOUT_S
            assert response[0] == 401 and response[1]["connection"] == "close"
            assert openai_error(response)["type"] == "authentication_error"
            assert closed(sock)
        # The one place is free for a caller with a key, at once.
        assert inflight.in_flight() == 0
        models_quickly(gateway_url, api_key.raw)
        started = time.monotonic()
        assert chat(gateway_url, api_key.raw).status_code == 200
        assert time.monotonic() - started < 1
    finally:
        for sock in socks:
            sock.close()
    assert len(stub.requests) == 1  # only the keyed call reached a backend


def test_an_anthropic_caller_without_a_key_gets_anthropics_401_before_its_body(
    gateway_url, backends, api_key, tight
):
    with unfinished(gateway_url, "/v1/messages", "anthropic-version: 2023-06-01") as sock:
        status, _headers, body = read_response(sock)
    assert status == 401
    payload = json.loads(body)
    assert payload["type"] == "error" and payload["error"]["type"] == "authentication_error"
    assert inflight.in_flight() == 0


def test_a_keyed_body_that_never_finishes_gets_a_408_and_gives_its_place_back(
    gateway_url, backends, api_key, stub, tight
):
    assert chat(gateway_url, api_key.raw).status_code == 200
    stub.requests.clear()
    Invocation.objects.all().delete()
    with unfinished(gateway_url, "/v1/chat/completions", f"Authorization: Bearer {api_key.raw}") as sock:
        time.sleep(0.2)
        assert inflight.in_flight() == 0  # its body has not arrived: it holds no place (round three)
        assert chat(gateway_url, api_key.raw).status_code == 200  # the one place is free meanwhile
        models_quickly(gateway_url, api_key.raw)  # the loop is free meanwhile
        started = time.monotonic()
        response = read_response(sock)
        waited = time.monotonic() - started
        assert response[0] == 408 and response[1]["connection"] == "close"
        assert waited < TIMEOUT_S + 1.5
        error = openai_error(response)
        assert error["code"] == "request_timeout" and "SKILLGATE_BODY_READ_TIMEOUT_S" in error["message"]
        assert closed(sock)
    wait_until(lambda: inflight.in_flight() == 0, timeout=5, what="the place to be given back")
    assert chat(gateway_url, api_key.raw).status_code == 200
    assert len(stub.requests) == 2 and Invocation.objects.count() == 2  # the slow one left no row


def test_a_slow_body_gets_its_408_in_each_interfaces_convention(gateway_url, backends, api_key, tight):
    with unfinished(gateway_url, "/api/incidents", f"Authorization: Bearer {api_key.raw}") as sock:
        status, headers, body = read_response(sock)
    assert status == 408 and headers["content-type"] == "application/json"
    assert set(json.loads(body)["error"]) == {"message", "code"}
    assert json.loads(body)["error"]["code"] == "request_timeout"
    with unfinished(gateway_url, "/accounts/login/") as sock:
        status, headers, body = read_response(sock)
    assert status == 408 and headers["content-type"].startswith("text/plain")
    assert b"SKILLGATE_BODY_READ_TIMEOUT_S" in body
    models_quickly(gateway_url, api_key.raw)


def test_a_head_that_never_ends_gets_a_408_from_the_server_as_served(served_url, backends, api_key, tight):
    """app/serve.py's protocol: headers, too, have the deadline (the app never sees this request)."""
    with connect(served_url, timeout=TIMEOUT_S + 4) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        started = time.monotonic()
        models_quickly(served_url, api_key.raw)
        response = read_response(sock)
        assert response[0] == 408 and time.monotonic() - started < TIMEOUT_S + 1.5
        assert openai_error(response)["code"] == "request_timeout"
        assert closed(sock)
    with connect(served_url, timeout=TIMEOUT_S + 4) as sock:  # a connection that sends nothing at all
        status, headers, _body = read_response(sock)
        assert status == 408 and headers["content-type"].startswith("text/plain")
    models_quickly(served_url, api_key.raw)


def test_a_head_past_64_kib_gets_a_431_from_the_server_as_served(served_url, backends, api_key, tight):
    with connect(served_url) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70_000)
        response = read_response(sock)
        assert response[0] == 431 and openai_error(response)["code"] == "headers_too_large"
    models_quickly(served_url, api_key.raw)
