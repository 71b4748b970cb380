"""100 concurrent calls at a key's budget edge, with everything that makes a call's cost hard to
bound at once: a best-of-4 teacher (every sample paid), student legs that fail verification or
error and fall back to it, streams, and clients that hang up mid-stream. The spend never passes the
budget, every row's cost is in the key's spend, and nothing stays reserved or leased."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.ledger import writer
from routing.models import ApiKey, Backend, BudgetLease, Invocation, Reservation, TaskProfile
from tests.factories import TaskProfileFactory, make_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
MAX_TOKENS = 30
# A teacher sample about MAX_TOKENS words long (the stub counts words as tokens): near its worst case.
SAMPLE = json.dumps({"city": "Paris", "note": " ".join(["w"] * (MAX_TOKENS - 4))})


def answer(body: dict[str, Any]) -> Reply:
    delay = random.uniform(0.05, 0.4)
    if "student" in str(body["model"]):  # fails verification, or errors: a fallback either way
        return Reply(status=503, error="student down") if random.random() < 0.3 else Reply(content="Paris")
    return Reply(content=SAMPLE, samples=[SAMPLE] * 4, delay_s=delay, chunk_delay_s=0.01)


def one_call(url: str, key: str, kind: int) -> int | None:
    """0: JSON; 1: a stream read to its end; 2: a stream the client hangs up on after its first event
    (None: hung up after the answer started)."""
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": "Which city? Answer as JSON."}],
        "max_tokens": MAX_TOKENS,
        "metadata": {"task": "edge"},
        "stream": kind > 0,
    }
    headers = {"Authorization": f"Bearer {key}"}
    if kind == 0:
        return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60).status_code
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60) as resp:
        for line in resp.iter_lines():
            if kind == 2 and resp.status_code == 200 and line.startswith("data: "):
                return None
        return resp.status_code


def test_a_hundred_calls_at_the_budget_edge_never_spend_past_it(gateway_url, backends, stub):
    Backend.objects.filter(pk=backends["teacher"].pk).update(samples=4)
    TaskProfileFactory.create(
        name="edge",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "json_schema", "schema": SCHEMA},
    )
    stub.responder = answer
    budget = Decimal("0.05")
    pair = make_key(budget_usd=budget)

    with ThreadPoolExecutor(max_workers=50) as pool:
        statuses = list(pool.map(lambda i: one_call(gateway_url, pair.raw, i % 3), range(100)))
    writer.drain()  # rows and spend committed, this server's idle lease returned

    finished = [s for s in statuses if s is not None]
    assert set(finished) == {200, 402}, statuses  # the edge was reached; refusals past it only
    assert statuses.count(None) > 0  # some clients hung up mid-stream
    teacher_calls = [r for r in stub.requests if "teacher" in str(r["model"])]
    assert teacher_calls and all(r.get("n") == 4 for r in teacher_calls if not r.get("stream"))
    key = ApiKey.objects.get(pk=pair.key.pk)
    rows = Invocation.objects.filter(api_key=key)
    spent = sum((row.cost_usd for row in rows), Decimal(0))
    assert rows.filter(fallback=True).exists()
    assert 0 < spent <= budget and key.spent_usd == spent
    assert key.reserved_usd == 0
    assert not Reservation.objects.exists() and not BudgetLease.objects.filter(api_key=key).exists()
