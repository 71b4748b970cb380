"""app/serve.py's 64 KiB bound on a request's head holds for a head that arrives whole (in one read, its
headers complete inside that read: the bound is counted as the parser meets the head, not after it), as
well as for one still arriving; a head under the bound is served. Through the server as the tests serve
it (the gateway_url fixture: app/serve.py's server), with raw sockets."""

from __future__ import annotations

import httpx
import pytest

from app.serve import MAX_HEADER_BYTES
from tests.support.raw_http import closed, connect, head, openai_error, read_response

pytestmark = pytest.mark.django_db(transaction=True)


def models_head(api_key: str, filler: int) -> bytes:
    return head("GET", "/v1/models", f"Authorization: Bearer {api_key}", "X-Filler: " + "a" * filler)


def test_a_whole_head_past_the_bound_gets_a_431_and_never_reaches_the_app(gateway_url, api_key):
    data = models_head(api_key.raw, MAX_HEADER_BYTES + 30_000)
    with connect(gateway_url) as sock:
        sock.sendall(data)  # one write: the head is complete within the server's first reads
        response = read_response(sock)
        assert response[0] == 431, response[:2]
        assert openai_error(response)["code"] == "headers_too_large"
        assert closed(sock)
    models = httpx.get(f"{gateway_url}/v1/models", headers={"Authorization": f"Bearer {api_key.raw}"})
    assert models.status_code == 200  # the server serves on


def test_a_head_under_the_bound_is_served(gateway_url, api_key):
    with connect(gateway_url) as sock:
        sock.sendall(models_head(api_key.raw, MAX_HEADER_BYTES - 2_000))
        status, _headers, body = read_response(sock)
    assert status == 200 and b'"data"' in body
