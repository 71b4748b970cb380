"""Every attempt the provider may bill is charged (issue 37, class 3).

A provider bills an attempt once it starts processing it. The stub upstream here hangs past the
backend's timeout, answers 500, or resets a stream mid-way; the gateway never sees a usage for those
attempts, so each is charged its worst case (``attempt_bound``: the prompt bound and the output cap at
the backend's prices), the ledger row says ``cost_basis == "bound"`` and counts the attempts, and a
retry is made only when the key's budget hold covers one more attempt.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import anthropic
import httpx
import openai
import pytest

from bench.support.openai_stub import Reply
from routing.budgets import to_cents
from routing.budgets.store import bound_to_cents
from routing.call.embeddings import EmbeddingRequest
from routing.ledger import writer
from routing.models import ApiKey, Backend, Invocation
from routing.pricing import attempt_bound, prices_for
from routing.protocol import ChatRequest
from tests.factories import make_key
from tests.support.gateway import client
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
MAX_TOKENS = 50
TIMEOUT_S = 0.4


def bound(teacher: Backend, request: dict[str, Any] | None = None) -> Decimal:
    """The worst case of one attempt of a chat call ``request`` (default: HELLO, MAX_TOKENS)."""
    request = request or {"model": "auto", "messages": HELLO, "max_tokens": MAX_TOKENS}
    body = ChatRequest.model_validate(request).upstream_body(max_tokens=request["max_tokens"])
    return attempt_bound(prices_for(teacher), body, max_tokens=request["max_tokens"])


def hang(teacher: Backend, stub: Any) -> None:
    """The teacher times out: the stub answers long after the backend's timeout."""
    Backend.objects.filter(pk=teacher.pk).update(timeout_s=TIMEOUT_S)
    stub.responder = lambda body: Reply(delay_s=TIMEOUT_S * 5)


def chat(gateway_url: str, key: str, **fields: Any) -> Any:
    return client(gateway_url, key).chat.completions.create(
        model="auto",
        messages=HELLO,  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS,
        **fields,
    )


def row() -> Invocation:
    found = wait_until(lambda: Invocation.objects.first(), timeout=20, what="the ledger row")
    assert found is not None
    return found


@pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "litellm"])
def test_a_timed_out_call_is_charged_the_bound_of_every_attempt_the_upstream_received(
    gateway_url, backends, stub, settings, direct
):
    settings.SKILLGATE = {**settings.SKILLGATE, "DIRECT_CLIENT": direct}
    teacher = backends["teacher"]
    hang(teacher, stub)
    pair = make_key()
    with pytest.raises(openai.APIStatusError) as caught:
        chat(gateway_url, pair.raw)
    assert caught.value.status_code == 504
    assert len(stub.requests) == 3  # the first attempt and the openai SDK's two retries
    call = row()
    assert call.attempts == 3 and call.cost_basis == "bound" and call.status_code == 504
    assert call.cost_usd == to_cents(3 * bound(teacher)) > 0
    (leg,) = call.legs
    assert leg["attempts"] == 3 and leg["cost_basis"] == "bound"
    writer.drain()
    assert ApiKey.objects.get(pk=pair.key.pk).spent_usd == call.cost_usd


@pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "litellm"])
def test_a_call_retried_after_server_errors_is_charged_per_attempt(
    gateway_url, backends, stub, settings, direct
):
    settings.SKILLGATE = {**settings.SKILLGATE, "DIRECT_CLIENT": direct}
    teacher = backends["teacher"]
    answers = iter([Reply(status=500), Reply(status=503), Reply(content="fine")])
    stub.responder = lambda body: next(answers)
    pair = make_key()
    answer = chat(gateway_url, pair.raw)
    assert answer.choices[0].message.content == "fine" and len(stub.requests) == 3
    call = row()
    assert call.attempts == 3 and call.cost_basis == "bound"
    usage = answer.usage
    assert usage is not None
    measured = usage.prompt_tokens * teacher.input_cost_per_token
    measured += usage.completion_tokens * teacher.output_cost_per_token
    assert call.cost_usd == to_cents(2 * bound(teacher) + measured)


def test_a_refused_attempt_costs_nothing_and_is_counted(gateway_url, backends, stub):
    stub.responder = lambda body: Reply(status=400, error="bad request")
    with pytest.raises(openai.APIStatusError) as caught:
        chat(gateway_url, make_key().raw)
    assert caught.value.status_code == 502 and len(stub.requests) == 1  # a refusal is not retried
    call = row()
    assert call.attempts == 1 and call.cost_usd == 0 and call.cost_basis == "usage"


@pytest.mark.parametrize("mode", ["lease", "reservation"])
def test_a_key_whose_budget_is_one_attempt_gets_no_free_retries(gateway_url, backends, stub, settings, mode):
    settings.SKILLGATE = {**settings.SKILLGATE, "BUDGET_MODE": mode}
    teacher = backends["teacher"]
    hang(teacher, stub)
    pair = make_key(budget_usd=bound_to_cents(bound(teacher)))
    with pytest.raises(openai.APIStatusError) as caught:
        chat(gateway_url, pair.raw)
    assert caught.value.status_code == 504
    assert len(stub.requests) == 1  # no retry: the hold has no room for a second attempt
    call = row()
    assert call.attempts == 1 and call.cost_usd == bound_to_cents(bound(teacher))
    # The budget is spent: the next call is refused before anything reaches the upstream.
    with pytest.raises(openai.APIStatusError) as refused:
        chat(gateway_url, pair.raw)
    assert refused.value.status_code == 402 and len(stub.requests) == 1
    writer.drain()
    key = ApiKey.objects.get(pk=pair.key.pk)
    assert key.spent_usd == key.budget_usd and key.reserved_usd == 0


@pytest.mark.parametrize("mode", ["lease", "reservation"])
def test_a_retry_with_room_in_the_budget_holds_more_and_settles_to_what_was_billed(
    gateway_url, backends, stub, settings, mode
):
    settings.SKILLGATE = {**settings.SKILLGATE, "BUDGET_MODE": mode}
    teacher = backends["teacher"]
    answers = iter([Reply(status=500), Reply(content="fine")])
    stub.responder = lambda body: next(answers)
    pair = make_key(budget_usd=bound_to_cents(bound(teacher)) * 2)  # room for exactly one retry
    assert chat(gateway_url, pair.raw).choices[0].message.content == "fine"
    call = row()
    assert call.attempts == 2 and bound_to_cents(bound(teacher)) < call.cost_usd <= pair.key.budget_usd
    writer.drain()
    key = ApiKey.objects.get(pk=pair.key.pk)
    assert key.spent_usd == call.cost_usd and key.reserved_usd == 0


def test_concurrent_timed_out_calls_never_spend_past_the_budget(gateway_url, backends, stub):
    teacher = backends["teacher"]
    hang(teacher, stub)
    pair = make_key(budget_usd=bound_to_cents(bound(teacher)) * 2)

    def attack(_: int) -> int:
        body = {"model": "auto", "messages": HELLO, "max_tokens": MAX_TOKENS}
        headers = {"Authorization": f"Bearer {pair.raw}"}
        url = f"{gateway_url}/v1/chat/completions"
        return httpx.post(url, json=body, headers=headers, timeout=60).status_code

    with ThreadPoolExecutor(max_workers=6) as pool:
        statuses = sorted(pool.map(attack, range(6)))
    assert statuses.count(504) == 2 and statuses.count(402) == 4, statuses
    assert len(stub.requests) == 2  # each hold covered one attempt; no retry found room
    writer.drain()
    key = ApiKey.objects.get(pk=pair.key.pk)
    assert key.spent_usd == key.budget_usd and key.reserved_usd == 0


def test_a_stream_the_upstream_resets_is_charged_its_bound(gateway_url, backends, stub):
    teacher = backends["teacher"]
    stub.responder = lambda body: Reply(content=" ".join(["word"] * 30), cut_after=3)
    pair = make_key()
    got = []
    with pytest.raises(openai.APIError):
        for chunk in chat(gateway_url, pair.raw, stream=True):
            got += [choice.delta.content for choice in chunk.choices if choice.delta.content]
    assert got  # words arrived before the reset
    call = row()
    (leg,) = call.legs
    assert leg["usage_estimated"] and leg["cost_basis"] == "bound" and call.cost_basis == "bound"
    assert call.cost_usd == to_cents(bound(teacher))


def test_a_stream_the_client_hangs_up_on_is_charged_its_bound(gateway_url, backends, stub):
    teacher = backends["teacher"]
    stub.responder = lambda body: Reply(content=" ".join(["word"] * 100), chunk_delay_s=0.05)
    pair = make_key()
    request = {"model": "auto", "messages": HELLO, "max_tokens": MAX_TOKENS, "stream": True}
    headers = {"Authorization": f"Bearer {pair.raw}"}
    with httpx.stream("POST", f"{gateway_url}/v1/chat/completions", json=request, headers=headers) as resp:
        for line in resp.iter_lines():
            if "word" in line:
                break  # hang up after the first words
    call = row()
    assert call.cost_basis == "bound" and call.cost_usd == to_cents(bound(teacher))


def test_a_streamed_call_retried_before_its_first_byte_is_charged_per_attempt(gateway_url, backends, stub):
    teacher = backends["teacher"]
    answers = iter([Reply(status=502), Reply(content="a b c")])
    stub.responder = lambda body: next(answers)
    pair = make_key()
    chunks = list(chat(gateway_url, pair.raw, stream=True, stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert usage is not None and len(stub.requests) == 2
    call = row()
    measured = usage.prompt_tokens * teacher.input_cost_per_token
    measured += usage.completion_tokens * teacher.output_cost_per_token
    assert call.attempts == 2 and call.cost_usd == to_cents(bound(teacher) + measured)


def test_an_anthropic_messages_call_that_times_out_is_charged_its_attempts(gateway_url, backends, stub):
    teacher = backends["teacher"]
    hang(teacher, stub)
    pair = make_key()
    sdk = anthropic.Anthropic(base_url=gateway_url, api_key=pair.raw, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as caught:
        sdk.messages.create(model="auto", max_tokens=MAX_TOKENS, messages=HELLO)  # type: ignore[arg-type]
    assert caught.value.status_code == 504
    call = row()
    assert call.attempts == 3 and call.cost_basis == "bound"
    sent = {"model": "auto", "messages": HELLO, "max_tokens": MAX_TOKENS}
    assert call.cost_usd == to_cents(3 * bound(teacher, sent))


def test_an_embeddings_call_that_times_out_is_charged_the_input_of_every_attempt(gateway_url, backends, stub):
    teacher = backends["teacher"]
    hang(teacher, stub)
    request = EmbeddingRequest.model_validate({"model": "teacher", "input": "some text to embed"})
    with pytest.raises(openai.APIStatusError) as caught:
        client(gateway_url, make_key().raw).embeddings.create(model="teacher", input="some text to embed")
    assert caught.value.status_code == 504 and len(stub.requests) == 3
    call = row()
    assert call.attempts == 3 and call.cost_basis == "bound"
    assert teacher.input_cost_per_token is not None
    assert call.cost_usd == to_cents(3 * teacher.input_cost_per_token * request.token_bound())
