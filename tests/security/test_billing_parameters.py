"""Every request parameter that changes the price is priced (issue 37, class 3).

The stub upstream bills as OpenAI does: a predicted output's rejected tokens count in
``completion_tokens``, and the answer names the service tier it was served at. A backend prices a
tier, audio and web search in its ``price_options`` (routing/price_options.py); a call using one it
has no price for is a 400 naming the parameter, and nothing reaches the upstream.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import openai
import pytest
from django.core.exceptions import ValidationError

from bench.support.openai_stub import Reply
from routing import pricing
from routing.budgets import to_cents
from routing.budgets.store import bound_to_cents
from routing.ledger import writer
from routing.models import ApiKey, Backend, Invocation
from routing.pricing import Usage, attempt_bound, cost_bound, prices_for, prompt_token_bound
from routing.protocol import ChatRequest
from tests.factories import make_key
from tests.support.gateway import client
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
TIERS = {"service_tiers": {"priority": 2, "flex": "0.5"}}
AUDIO_PART = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}

UNPRICED: dict[str, tuple[str, dict[str, Any], str]] = {
    # case: (endpoint, fields, the parameter the 400 names)
    "chat.service_tier": ("chat", {"service_tier": "priority"}, "service_tier"),
    "chat.stream.service_tier": ("chat", {"service_tier": "scale", "stream": True}, "service_tier"),
    "chat.web_search": ("chat", {"web_search_options": {}}, "web_search_options"),
    "chat.audio_out": (
        "chat",
        {"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}},
        "modalities",
    ),
    "chat.audio_in": (
        "chat",
        {"messages": [{"role": "user", "content": [AUDIO_PART]}]},
        "messages[0].content[0]",
    ),
    "responses.service_tier": ("responses", {"service_tier": "priority"}, "service_tier"),
    "responses.stream.service_tier": ("responses", {"service_tier": "flex", "stream": True}, "service_tier"),
}


def call(gateway_url: str, key: str, endpoint: str, **fields: Any) -> Any:
    sdk = client(gateway_url, key)
    if endpoint == "responses":
        return sdk.responses.create(model="auto", input="hi", **fields)
    return sdk.chat.completions.create(model="auto", **{"messages": HELLO, **fields})


def row() -> Invocation:
    found = wait_until(lambda: Invocation.objects.first(), timeout=20, what="the ledger row")
    assert found is not None
    return found


def usage_cost(teacher: Backend, prompt: int, completion: int) -> Decimal:
    assert teacher.input_cost_per_token is not None and teacher.output_cost_per_token is not None
    return prompt * teacher.input_cost_per_token + completion * teacher.output_cost_per_token


@pytest.mark.parametrize("case", sorted(UNPRICED))
def test_an_unpriced_price_changing_parameter_is_a_400_naming_it_before_any_upstream_call(
    gateway_url, backends, stub, case
):
    endpoint, fields, param = UNPRICED[case]
    with pytest.raises(openai.BadRequestError) as caught:
        result = call(gateway_url, make_key().raw, endpoint, **fields)
        list(result) if fields.get("stream") else None
    error = caught.value
    assert error.param == param and param in error.message, error.message
    assert "price" in error.message and error.code == "unpriced_parameter"
    assert stub.requests == [] and not Invocation.objects.exists()


@pytest.mark.parametrize(
    ("endpoint", "tier", "multiplier", "stream"),
    [
        ("chat", "priority", Decimal(2), False),
        ("chat", "priority", Decimal(2), True),
        ("chat", "flex", Decimal("0.5"), False),
        ("responses", "priority", Decimal(2), False),
        ("responses", "priority", Decimal(2), True),
    ],
)
def test_a_service_tier_is_charged_at_its_multiplier(
    gateway_url, backends, stub, endpoint, tier, multiplier, stream
):
    teacher = backends["teacher"]
    Backend.objects.filter(pk=teacher.pk).update(price_options=TIERS)
    stub.responder = lambda body: Reply(content="one two three")
    pair = make_key(budget_usd=Decimal(1))
    fields: dict[str, Any] = {"service_tier": tier, "stream": stream}
    if stream and endpoint == "chat":
        fields["stream_options"] = {"include_usage": True}
    result = call(gateway_url, pair.raw, endpoint, **fields)
    if stream:
        list(result)
    [sent] = stub.requests
    assert sent["service_tier"] == tier
    charged = row()
    (leg,) = charged.legs
    expected = multiplier * usage_cost(teacher, leg["prompt_tokens"], leg["completion_tokens"])
    assert leg["completion_tokens"] == 3 and charged.cost_usd == to_cents(expected) > 0
    assert charged.cost_basis == "usage" and charged.attempts == 1
    writer.drain()
    assert ApiKey.objects.get(pk=pair.key.pk).spent_usd == charged.cost_usd


def test_rejected_prediction_tokens_are_billed_as_output_and_held_for(gateway_url, backends, stub):
    teacher = backends["teacher"]
    prediction = {"type": "content", "content": " ".join(["a"] * 400)}
    request = {"model": "auto", "messages": HELLO, "max_tokens": 5, "prediction": prediction}
    body = ChatRequest.model_validate(request).upstream_body(max_tokens=5)
    prices = prices_for(teacher)
    # A budget of exactly this call's worst case, the prediction's rejected tokens included.
    pair = make_key(budget_usd=bound_to_cents(attempt_bound(prices, body, max_tokens=5)))
    stub.responder = lambda body: Reply(content="ok")
    answer = call(gateway_url, pair.raw, "chat", max_tokens=5, prediction=prediction)
    usage = answer.usage
    assert usage is not None and usage.completion_tokens == 401  # 1 answered + 400 rejected, > max_tokens
    charged = row()
    expected = to_cents(usage_cost(teacher, usage.prompt_tokens, usage.completion_tokens))
    assert charged.cost_usd == expected
    # Held as if the prediction did not exist, the call would have spent past its hold.
    assert expected > cost_bound(prices, prompt_tokens=prompt_token_bound(body), max_tokens=5)
    writer.drain()
    key = ApiKey.objects.get(pk=pair.key.pk)
    assert key.spent_usd == expected <= key.budget_usd and key.reserved_usd == 0
    # What is left cannot hold another such call: refused before the upstream sees it.
    with pytest.raises(openai.APIStatusError) as refused:
        call(gateway_url, pair.raw, "chat", max_tokens=5, prediction=prediction)
    assert refused.value.status_code == 402 and len(stub.requests) == 1


def test_web_search_is_charged_its_fee_per_call(gateway_url, backends, stub):
    teacher = backends["teacher"]
    Backend.objects.filter(pk=teacher.pk).update(price_options={"web_search_cost_per_call": "0.025"})
    answer = call(gateway_url, make_key().raw, "chat", web_search_options={})
    usage = answer.usage
    assert usage is not None
    expected = usage_cost(teacher, usage.prompt_tokens, usage.completion_tokens) + Decimal("0.025")
    assert row().cost_usd == to_cents(expected)


def test_audio_output_is_held_at_the_audio_price(gateway_url, backends, stub):
    teacher = backends["teacher"]
    dear = {"audio_output_cost_per_token": "0.001", "audio_input_cost_per_token": "0.0005"}
    Backend.objects.filter(pk=teacher.pk).update(price_options=dear)
    request = {"model": "auto", "messages": HELLO, "max_tokens": 100, "modalities": ["text", "audio"]}
    request["audio"] = {"voice": "alloy", "format": "wav"}
    body = ChatRequest.model_validate(request).upstream_body(max_tokens=100)
    teacher.refresh_from_db()
    held = attempt_bound(prices_for(teacher), body, max_tokens=100)
    assert held >= 100 * Decimal("0.001")  # the output cap at the audio price
    pair = make_key(budget_usd=bound_to_cents(held) - Decimal("0.00000001"))  # a cent short of it
    with pytest.raises(openai.APIStatusError) as refused:
        call(gateway_url, pair.raw, "chat", **{k: v for k, v in request.items() if k != "model"})
    assert refused.value.status_code == 402 and stub.requests == []


@pytest.mark.parametrize(
    "options",
    [
        {"service_tiers": {"priority": -1}},
        {"service_tiers": {"priority": "fast"}},
        {"service_tiers": ["priority"]},
        {"web_search_cost_per_call": True},
        {"audio_price": 1},
        "priority",
    ],
)
def test_price_options_that_are_not_prices_are_refused(backends, options):
    teacher = backends["teacher"]
    teacher.price_options = options
    with pytest.raises(ValidationError):
        teacher.full_clean()


def test_a_model_priced_higher_past_a_context_length_is_held_and_charged_at_that_price(transactional_db):
    # Priced from litellm's map: dearer input and output past 272k prompt tokens, and a priority tier.
    backend = Backend(name="mapped", role=Backend.Role.TEACHER, model="openai/gpt-6-astra")
    prices = prices_for(backend)
    assert prices.multiplier("priority") == 2 and prices.multiplier("flex") is not None
    short, long = Usage(prompt_tokens=1000), Usage(prompt_tokens=300_000)
    # Twice the price per token past 272k.
    assert pricing.usage_cost(prices, long) == 300 * pricing.usage_cost(prices, short) * 2
    body = {"messages": [{"role": "user", "content": "x" * 280_000}], "max_tokens": 10}
    held = attempt_bound(prices, body, max_tokens=10)
    assert held >= pricing.usage_cost(prices, Usage(prompt_tokens=280_000, completion_tokens=10))
    assert held > cost_bound(prices, prompt_tokens=prompt_token_bound(body), max_tokens=10)
