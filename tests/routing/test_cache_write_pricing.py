"""Prompt-cache writes are priced (issue 37): a content part's ``cache_control`` asks the provider to
write the prompt to its cache, billed above the input price (Anthropic: 1.25x, 2x for an hour). The
backend prices it (``price_options``, or litellm's map), the hold covers it and the usage's
``cache_creation_input_tokens`` settle at that price; on a backend with no such price the marker is
dropped, not sent (no write, nothing unbilled), and the answer says so (``x-skillgate-cache-write``)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import openai
import pytest
from django.core.exceptions import ValidationError

from bench.support.openai_stub import Reply
from routing import price_options, pricing, prompt_cache
from routing.budgets.store import bound_to_cents
from routing.models import Backend, Invocation
from routing.pricing import Prices, Usage, attempt_bound, prices_for, terms_of, usage_cost
from routing.protocol import ChatRequest
from tests.factories import make_key
from tests.support.gateway import client

WRITE, WRITE_1H = Decimal("0.00000375"), Decimal("0.000006")
PRICED = {price_options.CACHE_WRITE: str(WRITE), price_options.CACHE_WRITE_1H: str(WRITE_1H)}


def cached_prompt(ttl: str | None = None) -> list[dict[str, Any]]:
    control: dict[str, Any] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    long_text = "You are a careful assistant. " * 40
    part = {"type": "text", "text": long_text, "cache_control": control}
    return [{"role": "system", "content": [part]}, {"role": "user", "content": "hi"}]


def chat(gateway_url: str, key: str, messages: list[dict[str, Any]], **fields: Any) -> Any:
    return client(gateway_url, key).chat.completions.create(
        model="auto",
        messages=messages,  # type: ignore[arg-type]
        max_tokens=20,
        **fields,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("priced", "ttl", "stream"),
    [({}, None, False), ({}, None, True), ({price_options.CACHE_WRITE: str(WRITE)}, "1h", False)],
    ids=["unpriced", "unpriced-stream", "hour-unpriced"],
)
def test_a_cache_write_with_no_price_is_dropped_not_sent_and_the_call_answers(
    gateway_url, backends, stub, priced, ttl, stream
):
    Backend.objects.filter(pk=backends["teacher"].pk).update(price_options=priced)
    stub.responder = lambda body: Reply(content="ok")
    messages = cached_prompt(ttl)
    raw = client(gateway_url, make_key().raw).chat.completions.with_raw_response.create(
        model="auto",
        messages=messages,
        max_tokens=20,
        stream=stream,  # type: ignore[arg-type]
    )
    answer = raw.parse()
    list(answer) if stream else None
    assert raw.headers["x-skillgate-cache-write"] == "dropped"
    [sent] = stub.requests
    assert all("cache_control" not in part for part in sent["messages"][0]["content"])
    [row] = Invocation.objects.all()
    assert row.status_code == 200 and row.request["messages"][0]["content"][0]["cache_control"]["type"] == (
        "ephemeral"
    )  # the ledger keeps what the caller sent


@pytest.mark.django_db(transaction=True)
def test_a_priced_cache_write_is_sent_and_held_at_the_write_price(gateway_url, backends, stub):
    teacher = backends["teacher"]
    Backend.objects.filter(pk=teacher.pk).update(price_options=PRICED)
    stub.responder = lambda body: Reply(content="ok")
    messages = cached_prompt()
    body = ChatRequest.model_validate({"model": "auto", "messages": messages}).upstream_body(max_tokens=20)
    prices = prices_for(Backend.objects.get(pk=teacher.pk))
    with_write = attempt_bound(prices, body, max_tokens=20)
    uncached = [{**m, "content": [{"type": "text", "text": m["content"][0]["text"]}]} for m in messages[:1]]
    plain = attempt_bound(prices, {**body, "messages": uncached + messages[1:]}, max_tokens=20)
    assert with_write > plain  # the prompt's tokens at the write price, not the input price

    # A budget that holds the call at the input price but not at the write price: refused (402).
    short = make_key(budget_usd=bound_to_cents(with_write) - Decimal("0.00000001"))
    with pytest.raises(openai.APIStatusError) as caught:
        chat(gateway_url, short.raw, messages)
    assert caught.value.status_code == 402 and stub.requests == []

    enough = make_key(budget_usd=bound_to_cents(with_write))
    assert chat(gateway_url, enough.raw, messages).choices[0].message.content == "ok"
    [sent] = stub.requests
    assert sent["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    response = client(gateway_url, make_key().raw).chat.completions.with_raw_response.create(
        model="auto",
        messages=messages,
        max_tokens=20,  # type: ignore[arg-type]
    )
    assert response.headers["x-skillgate-cache-write"] == "forwarded"


def test_the_usage_of_a_cache_write_settles_at_the_write_price() -> None:
    prices = Prices(input=Decimal("0.000003"), output=Decimal("0.000015"), cached_input=Decimal("0.0000003"))
    prices = pricing._with_options(prices, PRICED)
    five_minutes = terms_of({"messages": cached_prompt()})
    one_hour = terms_of({"messages": cached_prompt("1h")})
    assert (five_minutes.cache_write, one_hour.cache_write_1h) == (
        "messages[0].content[0].cache_control",
        True,
    )
    # litellm counts the written tokens in prompt_tokens; Anthropic reports them beside input_tokens.
    counted_in = Usage.from_openai(
        {"prompt_tokens": 1100, "completion_tokens": 10, "cache_creation_input_tokens": 1000}
    )
    beside = Usage.from_openai(
        {
            "prompt_tokens": 100,
            "completion_tokens": 10,
            "prompt_tokens_details": {"cache_creation_tokens": 1000},
        }
    )
    output = 10 * prices.output
    for usage in (counted_in, beside):
        assert usage.cache_write_tokens == 1000
        expected = 100 * prices.input + 1000 * WRITE + output
        assert usage_cost(prices, usage, five_minutes) == expected
        assert usage_cost(prices, usage, one_hour) == 100 * prices.input + 1000 * WRITE_1H + output
    # Written without asking (a provider's own caching) and priced nowhere: at the input price at least.
    bare = Prices(input=Decimal("0.000003"), output=Decimal("0.000015"), cached_input=Decimal("0.0000003"))
    assert usage_cost(bare, counted_in) == 1100 * bare.input + output


def test_litellms_map_prices_anthropic_cache_writes_and_options_are_validated() -> None:
    mapped = pricing._price_map("claude-sonnet-4-5")
    assert mapped is not None and mapped.cache_write is not None and mapped.cache_write > mapped.input
    assert mapped.cache_write_1h is not None and mapped.cache_write_1h > mapped.cache_write
    price_options.validate(PRICED)
    for hostile in ({price_options.CACHE_WRITE: "-1"}, {price_options.CACHE_WRITE_1H: "nan"}):
        with pytest.raises(ValidationError):
            price_options.validate(hostile)


def test_the_one_rule_drops_markers_only_where_their_write_is_unpriced() -> None:
    def backend(options: dict[str, str]) -> Backend:
        return Backend(
            name="b",
            model="m",
            input_cost_per_token=Decimal("0.000003"),
            output_cost_per_token=Decimal("0.000015"),
            price_options=options,
        )

    hour = {"messages": cached_prompt("1h")}
    assert prompt_cache.cache_writes(backend(PRICED), hour) == (hour, "forwarded")
    five_minutes_only = backend({price_options.CACHE_WRITE: str(WRITE)})
    sent, state = prompt_cache.cache_writes(five_minutes_only, hour)
    assert state == "dropped" and "cache_control" not in str(sent) and "cache_control" in str(hour)
    plain = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert prompt_cache.cache_writes(backend({}), plain) == (plain, "")
