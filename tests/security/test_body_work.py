"""Bodies of many small elements are worked on in turn, not all at once (issue 37, class 1; round four).

Every body bound held per request (100,000 elements, 4 MiB), but the Python walks after the parse (the
protocol's validation and translation, prompt-cache markers, price terms, dumps) cost a few microseconds
per element each. 14,000 one-word messages (98,000 elements, 0.5 MB) cost the serving process
100-250 ms, and four such calls at once held ``GET /v1/models`` for 1.4-1.9 s on chat, Messages and
Responses (0.9 s on ``/v1/messages/count_tokens``) on the shared development machine. Now the elements
worked on in one process are bounded together (routing/call/body_work.py): a heavy body waits for its
turn, and gives its weight back once its call is planned and priced.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from routing.call import body_work
from routing.errors import ApiError
from tests.support.liveness import models_keep_answering

WORDS = 14_000  # one-word messages: 98,000 elements, just under SKILLGATE_MAX_JSON_ELEMENTS
TURNS = [{"role": "user", "content": "h"}, {"role": "assistant", "content": "ok"}] * (WORDS // 2)
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "auto", "max_tokens": 5, "messages": TURNS},
    "/v1/messages": {"model": "auto", "max_tokens": 5, "messages": TURNS},
    "/v1/messages/count_tokens": {"model": "auto", "messages": TURNS},
    "/v1/responses": {"model": "auto", "max_output_tokens": 5, "input": TURNS},
}
HEAVY = json.dumps({"messages": TURNS}).encode()


def _turns(*bodies: tuple[bytes, int], budget: int = 100_000, wait_s: float = 5.0) -> list[str]:
    """Runs one ``turn`` per (body, key) at once; each records when it got in and leaves at once."""
    seen: list[str] = []

    async def one(index: int, body: bytes, key: int) -> None:
        try:
            async with body_work.turn(body, key, budget=budget, wait_s=wait_s):
                seen.append(f"in {index}")
                await asyncio.sleep(0.05)
                seen.append(f"out {index}")
        except ApiError as exc:
            seen.append(f"{exc.status} {index}")

    async def run() -> None:
        await asyncio.gather(*(one(i, body, key) for i, (body, key) in enumerate(bodies)))

    asyncio.run(run())
    return seen


def test_long_strings_weigh_by_their_bytes():
    # A 3 MB tool_use input is a few thousand elements; its scans, parse and dumps cost the loop
    # about 34 ms a call: eight at once held GET /v1/models 0.35-1.7 s (0.34-0.42 s weighed by bytes).
    three_mb = json.dumps({"input": {"data": ["x" * 1000] * 3000}}).encode()
    assert body_work.weight(three_mb) == len(three_mb) // body_work.BYTES_PER_ELEMENT > 45_000
    assert body_work.weight(json.dumps({"s": "x" * 250_000}).encode()) < body_work.LIGHT


def test_heavy_bodies_take_turns_and_light_ones_never_wait():
    assert body_work.weight(HEAVY) > 60_000
    assert body_work.weight(json.dumps(BODIES["/v1/chat/completions"]["messages"][:40]).encode()) == 0
    light = json.dumps({"messages": TURNS[:200]}).encode()  # 1,400 elements
    seen = _turns((HEAVY, 1), (HEAVY, 2), (light, 3))
    assert seen.index("in 1") > seen.index("out 0")  # the second heavy body waited for the first
    assert seen.index("in 2") < seen.index("out 0")  # the light one did not


def test_one_key_waits_for_at_most_eight_budgets_and_a_long_wait_is_a_503():
    seen = _turns(*[(HEAVY, 1)] * 9, (HEAVY, 2), budget=50_000)  # each body weighs a whole budget
    assert [s for s in seen if s.startswith("429")] == ["429 8"], seen  # the key's ninth body at once
    assert all(f"in {i}" in seen for i in (*range(8), 9))  # the others, and another key's, had their turn
    slow = _turns((HEAVY, 1), (HEAVY, 2), budget=100_000, wait_s=0.01)
    assert "503 1" in slow and "in 0" in slow


def test_planned_gives_the_weight_back_before_the_block_ends():
    order: list[str] = []

    async def first() -> None:
        async with body_work.turn(HEAVY, 1, budget=100_000, wait_s=5):
            body_work.planned()
            order.append("first planned")
            await asyncio.sleep(0.1)
            order.append("first ends")

    async def second() -> None:
        await asyncio.sleep(0.01)
        async with body_work.turn(HEAVY, 2, budget=100_000, wait_s=5):
            order.append("second in")

    async def run() -> None:
        await asyncio.gather(first(), second())

    asyncio.run(run())
    assert order == ["first planned", "second in", "first ends"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", list(BODIES))
def test_four_bodies_of_small_elements_leave_the_gateway_live(path, gateway_url, backends, api_key, stub):
    raw = json.dumps(BODIES[path]).encode()
    key = api_key.raw
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "anthropic-version": "2023-06-01"}

    def ask(_: int) -> httpx.Response:
        return httpx.post(gateway_url + path, content=raw, headers=headers, timeout=120)

    assert ask(0).status_code == 200  # the first call of a fresh server loads litellm
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(4) as threads:
        responses = list(threads.map(ask, range(4)))
    codes = [r.status_code for r in responses]
    assert codes == [200] * 4, [r.text[:200] for r in responses]  # they waited their turns


@pytest.mark.slow  # 6-7 s under load 10: eight 1 MB counts tokenized one after another
@pytest.mark.django_db(transaction=True)
def test_counting_the_tokens_of_long_texts_takes_turns(gateway_url, backends, api_key, settings):
    # A 1 MB text is a handful of elements, but tokenizing it holds the GIL in 1 KB stretches for
    # 0.05-0.15 s of a thread: twelve 3.5 MB counts at once held GET /v1/models 0.4-1.0 s. Weighed by
    # its bytes, each takes a whole budget here, so the key's ninth at once is refused, never run.
    settings.SKILLGATE = {**settings.SKILLGATE, "MAX_JSON_ELEMENTS": 20_000}
    text = "lorem ipsum dolor sit amet " * (1024 * 1024 // 27)
    raw = json.dumps({"model": "auto", "messages": [{"role": "user", "content": text}]}).encode()
    key = api_key.raw
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"}

    def ask(_: int) -> httpx.Response:
        url = f"{gateway_url}/v1/messages/count_tokens"
        return httpx.post(url, content=raw, headers=headers, timeout=120)

    assert ask(0).status_code == 200  # the first call of a fresh server loads litellm
    with models_keep_answering(gateway_url, key), ThreadPoolExecutor(9) as threads:
        responses = list(threads.map(ask, range(9)))
    codes = sorted(r.status_code for r in responses)
    assert 200 in codes and 429 in codes, codes
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.json()["error"]["type"] == "rate_limit_error" and "large request bodies" in refused.text
