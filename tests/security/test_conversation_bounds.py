"""A stored conversation is bounded and walked like a body (issue 37, class 1; round five).

``POST /v1/responses`` with ``previous_response_id`` continues a stored response: the ledger row's
conversation is loaded and the new input appended, and that row stores the whole conversation again.
Round five's probe: every body of a chain was under the element bound, but the conversation grew by a
body each call (five calls of 13,000 messages: 65,000 messages), and then a body of two words made the
serving process load, translate, plan and price all of it, outside the body work's turn (its weight
was the two words'). Four such calls at once held ``GET /v1/models`` for 1.5 s. Now the conversation
and the new input together are bounded like one body (``SKILLGATE_MAX_JSON_ELEMENTS``: a 400 naming
it, before anything reaches the upstream), and the conversation's weight takes its turn
(routing/api/responses/store.py ``conversation_json``, routing/call/body_work.py).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from routing.models import Invocation
from tests.support.liveness import models_keep_answering
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = [{"role": "user", "content": f"w{i}"} for i in range(13_000)]  # about 91,000 elements


def _respond(gateway_url: str, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{gateway_url}/v1/responses",
        content=json.dumps({"model": "auto", "max_output_tokens": 5, **body}),
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def _stored(gateway_url: str, key: str) -> str:
    """A stored response whose conversation holds the 13,000 messages."""
    first = _respond(gateway_url, key, {"input": MESSAGES})
    assert first.status_code == 200, first.text
    return str(first.json()["id"])


def test_a_conversation_grown_past_the_element_bound_is_a_400_before_the_upstream(
    gateway_url, backends, api_key, stub
):
    previous = _stored(gateway_url, api_key.raw)
    sent = len(stub.requests)
    grown = _respond(gateway_url, api_key.raw, {"previous_response_id": previous, "input": MESSAGES})
    assert grown.status_code == 400, grown.text[:300]
    error = grown.json()["error"]
    assert error["param"] == "previous_response_id" and error["code"] == "conversation_too_large"
    assert "SKILLGATE_MAX_JSON_ELEMENTS" in error["message"]
    assert len(stub.requests) == sent  # nothing reached the upstream
    wait_until(lambda: Invocation.objects.count() == 1, timeout=20, what="the first call's row alone")
    # A conversation within the bound goes on.
    small = _respond(gateway_url, api_key.raw, {"previous_response_id": previous, "input": "and now?"})
    assert small.status_code == 200, small.text[:300]
    assert len(stub.requests[-1]["messages"]) == len(MESSAGES) + 2  # the conversation, its answer, the input


def test_tiny_calls_continuing_a_large_conversation_take_turns_and_stall_no_one(
    gateway_url, backends, api_key, stub
):
    """The largest conversation a chain can now store (one body's worth), continued eight times at
    once. (It passes without the fix as well: what stalled was the growth the 400 above stops.)"""
    previous = _stored(gateway_url, api_key.raw)
    body = {"previous_response_id": previous, "input": "go on"}
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(8) as threads:
        answers = list(threads.map(lambda _: _respond(gateway_url, api_key.raw, body), range(8)))
    assert [a.status_code for a in answers] == [200] * 8, answers[0].text[:300]
