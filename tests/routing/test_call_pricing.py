"""routing/call/plans.py ``CallPlan.pricing`` (issue 42): what pricing reads of a leg's upstream body (the
backend's prices, the price-changing terms, the prompt's token bound) is read once per call and backend,
for the budget hold, the leg's attempts and its answer's price, and is exactly what reading the body gives."""

from __future__ import annotations

import copy
from collections import Counter
from decimal import Decimal

import pytest

from bench.support.openai_stub import Reply
from routing import pricing, prompt_cache
from routing.call import plans
from routing.call.plans import LegPricing, plan_call
from routing.models import Backend, Invocation
from routing.pricing import attempt_bound, prices_for, prompt_token_bound, terms_of
from tests.factories import TaskProfileFactory, make_key
from tests.support.gateway import client

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = {"type": "ephemeral", "ttl": "1h"}
REQUEST = {
    "model": "auto",
    "messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": [{"type": "text", "text": "Look it up.", "cache_control": MARKER}]},
    ],
    "service_tier": "default",
}


@pytest.fixture
def plan(backends: dict[str, Backend]):
    """A plan whose teacher prices the one-hour cache write it asks for and whose student does not (so its
    marker is dropped) and gets a SkillBook in front."""
    Backend.objects.filter(pk=backends["teacher"].pk).update(
        price_options={"cache_write_1h_input_cost_per_token": "0.00002"}
    )
    profile = TaskProfileFactory.create(name="priced", skillbook_text="Say the city.")
    return plan_call(profile=profile, request=REQUEST)


def test_a_plan_reads_each_backends_pricing_once_and_it_is_what_the_body_gives(plan):
    for backend in (plan.teacher, plan.student):
        pricing = plan.pricing(backend)
        body = plan.body_for(backend)
        assert pricing == LegPricing(prices_for(backend), terms_of(body), prompt_token_bound(body))
        # the hold's, the leg's attempts' and its answer's: one object, not three readings
        assert plan.pricing(backend, body) is pricing
        assert plan.pricing(backend, plan.leg_body(backend)) is pricing
        for answers in (1, 3):
            expected = attempt_bound(prices_for(backend), body, max_tokens=plan.max_tokens, answers=answers)
            assert pricing.bound(max_tokens=plan.max_tokens, answers=answers) == expected > 0


def test_a_body_a_leg_changed_is_priced_from_itself(plan):
    planned = plan.pricing(plan.teacher)
    asking_n = plan.body_for(plan.teacher)
    asking_n["n"] = 3  # a leg asking for n answers sends more bytes: its own bound
    changed = plan.pricing(plan.teacher, asking_n)
    assert changed is not planned
    assert changed.prompt_tokens == prompt_token_bound(asking_n) > planned.prompt_tokens
    assert changed.terms == terms_of(asking_n)
    # equal but not the same objects: read again, with the same result
    deep = copy.deepcopy(plan.body_for(plan.teacher))
    again = plan.pricing(plan.teacher, deep)
    assert again is not planned and again == planned


def test_each_caller_gets_its_own_copy_of_the_planned_body(plan):
    first = plan.body_for(plan.teacher)
    first["n"] = 5
    del first["messages"]
    second = plan.body_for(plan.teacher)
    assert second is not first and "n" not in second and second["messages"] == REQUEST["messages"]
    assert plan.pricing(plan.teacher, second) is plan.pricing(plan.teacher)
    assert plan.body_for(plan.teacher, temperature=0.5)["temperature"] == 0.5  # overrides: built anew
    assert "temperature" not in plan.body_for(plan.teacher)


def test_the_cache_write_and_the_terms_follow_what_each_backend_prices(plan):
    teacher, student = plan.teacher, plan.student
    raw = plan.request.upstream_body(max_tokens=plan.max_tokens)
    for backend, verdict in ((teacher, prompt_cache.FORWARDED), (student, prompt_cache.DROPPED)):
        assert plan.cache_write(backend) == verdict == prompt_cache.cache_writes(backend, raw)[1]
    assert plan.pricing(teacher).terms.cache_write_1h and plan.pricing(teacher).terms.cache_write is not None
    assert plan.pricing(student).terms.cache_write is None  # dropped: no write is held or billed
    assert plan.body_for(student)["messages"][0]["content"].startswith("Say the city.")
    assert plan.pricing(teacher).prices.cache_write_1h == Decimal("0.00002")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_call_with_cache_markers_reads_its_legs_prices_once_and_is_priced_as_before(
    gateway_url, backends, stub, monkeypatch, stream
):
    """Through the running gateway: the cache-write rule (routing/prompt_cache.py), the budget hold,
    the attempts' worst case and the answer's price share one reading of the leg's prices (it was two
    with a cache marker), and the row's cost is what the usage at those prices and the sent terms give."""
    teacher = backends["teacher"]
    Backend.objects.filter(pk=teacher.pk).update(
        price_options={"cache_write_1h_input_cost_per_token": "0.00002"}
    )
    reads: Counter[int] = Counter()
    real = pricing.prices_for

    def counted(backend: Backend) -> pricing.Prices:
        reads[backend.pk] += 1
        return real(backend)

    # every name the gateway reads prices by: the module's and the plan's own import
    monkeypatch.setattr(pricing, "prices_for", counted)
    monkeypatch.setattr(plans, "prices_for", counted)
    stub.responder = lambda body: Reply(content="it is sunny in Oslo")
    raw = client(gateway_url, make_key().raw).chat.completions.with_raw_response.create(
        model="auto",
        messages=REQUEST["messages"],  # type: ignore[arg-type]
        max_tokens=20,
        stream=stream,  # type: ignore[arg-type]
        **({"stream_options": {"include_usage": True}} if stream else {}),
    )
    answer = raw.parse()
    list(answer) if stream else None  # type: ignore[call-overload]
    assert raw.headers["x-skillgate-cache-write"] == prompt_cache.FORWARDED
    assert reads == {teacher.pk: 1}

    [sent] = stub.requests
    assert sent["messages"][1]["content"][0]["cache_control"] == MARKER
    row = Invocation.objects.get()
    assert row.status_code == 200 and row.prompt_tokens > 0 and row.completion_tokens > 0
    usage = pricing.Usage.from_openai(
        {"prompt_tokens": row.prompt_tokens, "completion_tokens": row.completion_tokens}
    )
    expected = pricing.usage_cost(real(Backend.objects.get(pk=teacher.pk)), usage, terms_of(sent))
    assert expected > 0 and row.cost_usd == expected.quantize(row.cost_usd)
