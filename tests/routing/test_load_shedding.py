"""SKILLGATE_MAX_IN_FLIGHT: past the limit a call gets an immediate 503 OpenAI error with Retry-After and
leaves no trace; a streamed call counts until its stream ends; the openai SDK's retry gets through."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from bench.support.openai_stub import Reply
from routing.api import inflight
from routing.models import Invocation, Reservation
from tests.factories import make_key
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}


@pytest.fixture
def limit_two(settings):
    settings.SKILLGATE = {**settings.SKILLGATE, "MAX_IN_FLIGHT": 2}
    wait_in_flight(0)  # Django finishes its request after the client has the last byte


def post(gateway_url: str, key: str, **extra: object) -> httpx.Response:
    return httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json={**HELLO, **extra},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def wait_in_flight(count: int) -> None:
    wait_until(lambda: inflight.in_flight() == count, timeout=10, interval=0.02, what=f"{count} in flight")


def test_a_call_past_the_limit_is_shed_at_once_and_leaves_nothing_behind(
    gateway_url, backends, stub, limit_two
):
    key = make_key(budget_usd=1).raw
    assert post(gateway_url, key).status_code == 200  # a fresh server's first call loads litellm
    stub.responder = lambda body: Reply(content="slow", delay_s=8)
    with ThreadPoolExecutor(max_workers=2) as pool:
        held = [pool.submit(post, gateway_url, key) for _ in range(2)]
        wait_in_flight(2)
        shed = post(gateway_url, key)
        assert not any(f.done() for f in held)  # answered while both still run: not queued behind them
        assert shed.status_code == 503 and shed.headers["Retry-After"] == "1"
        error = shed.json()["error"]
        assert (error["type"], error["code"]) == ("server_error", "overloaded")
        assert "2 calls in flight" in error["message"]
        assert [f.result().status_code for f in held] == [200, 200]
    assert Invocation.objects.count() == 3 and Reservation.objects.count() == 0
    wait_in_flight(0)  # Django finishes its request after the client has the last byte
    stub.responder = lambda body: Reply(content="fast")
    assert post(gateway_url, key).status_code == 200  # room again


def test_a_stream_counts_until_its_last_chunk_and_the_sdk_retries_a_shed_call(
    gateway_url, backends, stub, limit_two
):
    key = make_key().raw
    stub.responder = lambda body: Reply(content="one two three four", chunk_delay_s=0.5)
    streams = []

    def read_stream() -> None:
        with httpx.stream(
            "POST",
            f"{gateway_url}/v1/chat/completions",
            json={**HELLO, "stream": True},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        ) as response:
            streams.append(b"".join(response.iter_bytes()))

    readers = [threading.Thread(target=read_stream) for _ in range(2)]
    for reader in readers:
        reader.start()
    wait_in_flight(2)
    assert post(gateway_url, key).status_code == 503  # both streams still sending
    # The SDK retries a 503 after Retry-After; the streams end meanwhile and the retry gets through.
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=5)
    stub.responder = lambda body: Reply(content="after")
    answer = client.chat.completions.create(**HELLO)  # type: ignore[call-overload]
    assert answer.choices[0].message.content == "after"
    for reader in readers:
        reader.join(10)
    assert all(s.rstrip().endswith(b"data: [DONE]") for s in streams)
    wait_in_flight(0)  # Django finishes its request after the client has the last byte
