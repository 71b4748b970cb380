"""One path normaliser (core/paths.py) for every check: a path spelled differently (trailing slash,
doubled slashes) is the same path to the load shedder, the router and the scopes, so no spelling is
served past a limit another spelling gets; a spelling no part resolves (dot segments) is unknown to all
of them alike, a 404, never served."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.api import inflight
from routing.models import Invocation
from tests.factories import make_key
from tests.support.wait import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
MESSAGES = {"model": "auto", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
SPELLINGS = [
    ("/v1/chat/completions/", CHAT),
    ("/v1//chat/completions", CHAT),
    ("//v1/chat/completions", CHAT),
    ("/v1/messages/", MESSAGES),
    ("/v1/responses/", {"model": "auto", "input": "hi"}),
    ("/v1/embeddings/", {"model": "auto", "input": "hi"}),
]


def _post(gateway_url: str, key: str, path: str, body: dict[str, object]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key}
    # httpx would normalise dot segments itself: send the path exactly as spelled.
    return httpx.post(
        httpx.URL(gateway_url).copy_with(raw_path=path.encode()), json=body, headers=headers, timeout=30
    )


def test_every_spelling_of_a_call_path_is_shed_past_the_limit(gateway_url, backends, stub, settings):
    settings.SKILLGATE = {**settings.SKILLGATE, "MAX_IN_FLIGHT": 2}
    key = make_key(budget_usd=1).raw
    wait_until(lambda: inflight.in_flight() == 0, timeout=10, what="nothing in flight")
    stub.responder = lambda request: Reply(content="slow", delay_s=8)
    with ThreadPoolExecutor(max_workers=2) as pool:
        held = [pool.submit(_post, gateway_url, key, "/v1/chat/completions", CHAT) for _ in range(2)]
        wait_until(lambda: inflight.in_flight() == 2, timeout=10, what="two in flight")
        shed = {path: _post(gateway_url, key, path, body).status_code for path, body in SPELLINGS}
        assert not any(f.done() for f in held)  # all answered while the two still ran
        assert [f.result().status_code for f in held] == [200, 200]
    assert shed == {path: 503 for path, _ in SPELLINGS}
    assert Invocation.objects.count() == 2  # the shed calls wrote nothing


# Percent-encoded, so that no client or server library on the way resolves them first.
DOTTED = ["/v1/%2E/chat/completions", "/v1/models/%2E%2E/chat/completions", "/v1/chat/completions/%2E"]


@pytest.mark.parametrize("path", DOTTED)
def test_a_dot_segment_spelling_is_an_unknown_path_never_served(gateway_url, backends, api_key, stub, path):
    response = _post(gateway_url, api_key.raw, path, CHAT)
    assert response.status_code == 404 and response.json()["error"]["code"] == "unknown_url"
    assert not Invocation.objects.exists() and stub.requests == []


@pytest.mark.parametrize(("path", "body"), SPELLINGS[:2], ids=[p for p, _ in SPELLINGS[:2]])
def test_a_spelling_below_the_limit_is_served_and_recorded_like_the_canonical_path(
    gateway_url, backends, api_key, stub, path, body
):
    response = _post(gateway_url, api_key.raw, path, body)
    assert response.status_code == 200, response.text
    assert Invocation.objects.get().endpoint == Invocation.Endpoint.CHAT
