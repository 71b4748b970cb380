"""An upstream's usage that lies (issue 37, class 3: usage missing or lying, negative, huge).

A provider's usage is what a call is charged, but an upstream that is down, compromised or simply
wrong can report any number, in any type. Through the running server, with an upstream that answers
each case's usage: the call answers, its ledger row is written (nothing goes unbilled because a
number did not fit the ledger), the charge is never below zero, and never past what the call was held
for: an attempt is billed at most its worst case (routing/pricing.py ``attempt_bound``), whatever the
usage says.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from routing.budgets.store import bound_to_cents
from routing.ledger import writer
from routing.models import ApiKey, Backend, Invocation
from routing.pricing import attempt_bound, prices_for
from routing.protocol import ChatRequest
from tests.factories import make_key
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
USAGES: dict[str, Any] = {
    "huge": {"prompt_tokens": 10**30, "completion_tokens": 10**30, "total_tokens": 2 * 10**30},
    "past-int64": {"prompt_tokens": 3, "completion_tokens": 2**70, "total_tokens": 2**70},
    "huge-float": {"prompt_tokens": 1e300, "completion_tokens": 1e300},
    "negative": {"prompt_tokens": -1000, "completion_tokens": -5000, "total_tokens": -6000},
    "strings": {"prompt_tokens": "12", "completion_tokens": "9" * 40},
    "nested-lies": {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 10**30, "audio_tokens": -4},
        "completion_tokens_details": {"audio_tokens": 10**30},
        "cache_creation_input_tokens": 10**30,
    },
    "wrong-types": {"prompt_tokens": [1], "completion_tokens": {"a": 1}, "prompt_tokens_details": "x"},
    "missing": None,
}


class Liar:
    """An OpenAI-protocol upstream answering "ok" with the usage it is told to."""

    def __init__(self) -> None:
        self.usage: Any = None
        self.requests: list[dict[str, Any]] = []
        liar = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                request = json.loads(self.rfile.read(length))
                liar.requests.append(request)
                if request.get("stream"):
                    self._stream()
                    return
                answer: dict[str, Any] = {
                    "id": "chatcmpl-liar",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "liar",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "ok"},
                            "finish_reason": "stop",
                        }
                    ],
                }
                if liar.usage is not None:
                    answer["usage"] = liar.usage
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _stream(self) -> None:
                base = {
                    "id": "chatcmpl-liar",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "liar",
                }
                delta = {"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": None}
                chunks = [
                    {**base, "choices": [delta]},
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                ]
                if liar.usage is not None:
                    chunks.append({**base, "choices": [], "usage": liar.usage})
                body = (
                    b"".join(f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks)
                    + b"data: [DONE]\n\n"
                )
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def liar(backends: dict[str, Backend]) -> Iterator[Liar]:
    upstream = Liar()
    thread = threading.Thread(target=upstream.server.serve_forever, daemon=True)
    thread.start()
    Backend.objects.update(api_base=upstream.base_url)
    yield upstream
    upstream.server.shutdown()
    upstream.server.server_close()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("case", sorted(USAGES))
def test_a_lying_usage_is_charged_between_zero_and_the_calls_worst_case(
    gateway_url, backends, liar, case, stream
):
    liar.usage = USAGES[case]
    pair = make_key(budget_usd=Decimal(5))
    request: dict[str, Any] = {"model": "auto", "messages": HELLO, "max_tokens": 20, "stream": stream}
    if stream:
        request["stream_options"] = {"include_usage": True}
    response = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json=request,
        headers={"authorization": f"Bearer {pair.raw}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert "ok" in response.text
    row = wait_until(lambda: Invocation.objects.first(), timeout=20, what="the ledger row")
    assert row is not None
    teacher = Backend.objects.get(pk=backends["teacher"].pk)
    [sent] = liar.requests
    body = ChatRequest.model_validate({"model": "auto", "messages": HELLO}).upstream_body(max_tokens=20)
    worst = bound_to_cents(attempt_bound(prices_for(teacher), {**body, **sent}, max_tokens=20))
    assert Decimal(0) <= row.cost_usd <= worst, (row.cost_usd, worst)
    writer.drain()
    key = ApiKey.objects.get(pk=pair.key.pk)
    assert key.spent_usd == row.cost_usd and key.reserved_usd == 0
