"""Every billed byte is priced. The provider here bills as real ones do, every prompt byte it is sent
(bench/support/openai_stub.py ``bills_prompt_bytes``), and the gateway's worst case of a call
(routing/pricing.py ``prompt_token_bound``: every byte of the upstream body) must never be below it:

- a budget hold counts whatever field carries the bytes (functions, tools, a response schema, a system
  text or instructions, in each protocol) and the most a provider bills for media the body only names
  (a file id, an image URL), so a call its key cannot afford is refused before it is sent;
- a stream the client hangs up on before the usage chunk is charged at least what the provider bills.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from bench.support.openai_stub import Reply, billed_prompt_tokens
from routing.models import Invocation
from tests.factories import make_key
from tests.support.attacks import during
from tests.support.gateway import TEACHER_PRICES
from tests.support.wait import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

HELLO = [{"role": "user", "content": "hi"}]
BIG = "lorem ipsum dolor sit amet " * 40_000  # ~1.1 MB: ~270k tokens billed, $2.7 at the teacher's price
BUDGET = Decimal("0.25")  # an ordinary call costs well under a cent
SCHEMA = {"type": "object", "description": BIG[:60_000]}  # under the 64 KiB schema bound

FILE_BY_ID = [{"type": "text", "text": "summarize"}, {"type": "file", "file": {"file_id": "file-abc123"}}]
CARRIERS: dict[str, tuple[str, dict[str, Any]]] = {
    # A document named by a provider's file id: billed for its pages, which the body does not show.
    "chat.file_id": ("/v1/chat/completions", {"messages": [{"role": "user", "content": FILE_BY_ID}]}),
    "chat.functions": ("/v1/chat/completions", {"functions": [{"name": "f", "description": BIG}]}),
    "chat.tools": (
        "/v1/chat/completions",
        {"tools": [{"type": "function", "function": {"name": "f", "description": BIG}}]},
    ),
    "chat.system": ("/v1/chat/completions", {"messages": [{"role": "system", "content": BIG}, *HELLO]}),
    "responses.instructions": ("/v1/responses", {"input": "hi", "instructions": BIG}),
    "responses.tools": (
        "/v1/responses",
        {"input": "hi", "tools": [{"type": "function", "name": "f", "description": BIG}]},
    ),
    "messages.system": ("/v1/messages", {"max_tokens": 5, "messages": HELLO, "system": BIG}),
    "messages.tools": (
        "/v1/messages",
        {
            "max_tokens": 5,
            "messages": HELLO,
            "tools": [{"name": "f", "description": BIG, "input_schema": {}}],
        },
    ),
}


def _post(gateway_url: str, key: str, path: str, fields: dict[str, Any]) -> httpx.Response:
    body = {"model": "auto", **({"messages": HELLO} if path.endswith("completions") else {}), **fields}
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key}
    return httpx.post(gateway_url + path, content=json.dumps(body), headers=headers, timeout=60)


@pytest.mark.parametrize("carrier", sorted(CARRIERS))
def test_a_hold_prices_every_billed_field_and_refuses_what_the_key_cannot_pay(
    gateway_url, backends, stub, monkeypatch, settings, carrier
):
    monkeypatch.setattr(stub, "bills_prompt_bytes", True)
    settings.SKILLGATE = {**settings.SKILLGATE, "MAX_BODY_BYTES": 8 * 1024 * 1024}
    pair = make_key(budget_usd=BUDGET)
    path, fields = CARRIERS[carrier]
    stub.requests.clear()
    [response] = during(lambda: _post(gateway_url, pair.raw, path, fields), gateway_url, pair.raw)
    assert response.status_code == 402, response.text[:300]
    assert "budget" in response.json()["error"]["message"]
    assert [len(json.dumps(r)) < 10_000 for r in stub.requests] == [True]  # the ordinary call alone
    pair.key.refresh_from_db()
    assert pair.key.spent_usd == Invocation.objects.get().cost_usd <= BUDGET


def test_a_stream_cut_before_its_usage_is_charged_at_least_what_the_provider_bills(
    gateway_url, backends, stub, monkeypatch, settings
):
    monkeypatch.setattr(stub, "bills_prompt_bytes", True)
    settings.SKILLGATE = {**settings.SKILLGATE, "MAX_BODY_BYTES": 8 * 1024 * 1024}
    stub.responder = lambda body: Reply(content=" ".join(["word"] * 200), chunk_delay_s=0.05)
    key = make_key().raw
    tools = [
        {"type": "function", "function": {"name": f"f{i}", "description": BIG[:200_000]}} for i in range(10)
    ]
    body = {"model": "auto", "messages": HELLO, "tools": tools, "stream": True}
    with httpx.stream(
        "POST", f"{gateway_url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and "word" in line:
                break  # hang up after the first words, long before the usage chunk
    row = wait_until(lambda: Invocation.objects.first(), timeout=30, what="the cut stream's row")
    [sent] = stub.requests
    billed = billed_prompt_tokens(sent) * TEACHER_PRICES[0]  # what the provider charges for the prompt
    assert billed > Decimal("4")  # megabytes of tools: the charge that matters
    assert row.legs[0]["usage_estimated"] and row.cost_usd >= billed
