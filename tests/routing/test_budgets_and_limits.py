"""Budgets hold under concurrency (reserve, then settle) and rate limits answer 429."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from django.utils import timezone

from bench.support.openai_stub import Reply
from routing import budgets
from routing.ledger import writer
from routing.models import ApiKey, Invocation, Reservation
from routing.pricing import cost_bound, prices_for, prompt_token_bound
from tests.factories import ApiKeyFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}


def call(gateway_url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json=HELLO,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def test_concurrent_calls_never_overspend_the_budget(gateway_url, backends, stub):
    # Each call reserves its worst case; the budget fits exactly three of them at once.
    teacher = backends["teacher"]
    body = {"messages": HELLO["messages"], "max_tokens": 50}
    worst = cost_bound(prices_for(teacher), prompt_tokens=prompt_token_bound(body), max_tokens=50)
    pair = make_key(budget_usd=worst * 3)
    key = pair.key
    # The upstream holds each call long enough that all ten arrive while the first three still hold
    # their reservations (a call that settled would free the unused part of its worst case).
    stub.responder = lambda body: Reply(content="a b c", delay_s=3)

    with ThreadPoolExecutor(max_workers=10) as pool:
        statuses = [r.status_code for r in pool.map(lambda _: call(gateway_url, pair.raw), range(10))]

    assert statuses.count(200) == 3, statuses
    assert statuses.count(402) == 7
    writer.drain()  # the rows and spend committed, this server's idle budget lease returned
    key.refresh_from_db()
    spent = sum(row.cost_usd for row in Invocation.objects.filter(api_key=key))
    assert key.spent_usd == spent
    assert 0 < key.spent_usd <= key.budget_usd
    assert key.reserved_usd == 0 and not Reservation.objects.exists()
    assert Invocation.objects.filter(api_key=key).count() == 3  # refused calls wrote no row


def test_over_budget_error_is_openai_shaped(gateway_url, backends):
    resp = call(gateway_url, make_key(budget_usd=Decimal("0.0000001")).raw)
    assert resp.status_code == 402
    assert resp.json()["error"]["code"] == "budget_exceeded"


def test_requests_per_minute_limit(gateway_url, backends):
    key = make_key(rpm_limit=3)
    statuses = [call(gateway_url, key.raw).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    resp = call(gateway_url, key.raw)
    assert resp.json()["error"]["type"] == "rate_limit_error"
    assert 1 <= int(resp.headers["Retry-After"]) <= 60
    other = make_key(rpm_limit=3)
    assert call(gateway_url, other.raw).status_code == 200  # limits are per key


def test_lost_reservations_are_released(transactional_db):
    key = ApiKeyFactory.create(budget_usd=Decimal(1))
    held = budgets.reserve(api_key_id=key.pk, amount=Decimal("0.4"))
    fresh = budgets.reserve(api_key_id=key.pk, amount=Decimal("0.4"))
    with pytest.raises(budgets.BudgetExceeded):
        budgets.reserve(api_key_id=key.pk, amount=Decimal("0.4"))
    Reservation.objects.filter(pk=held.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert budgets.release_expired() == 1
    assert budgets.release_expired() == 0  # idempotent
    key.refresh_from_db()
    assert key.reserved_usd == Decimal("0.4")
    assert Reservation.objects.get().pk == fresh.pk
    budgets.settle(reservation=held, actual=Decimal(0))  # a late settle must not release twice
    key.refresh_from_db()
    assert key.reserved_usd == Decimal("0.4")


def test_settle_moves_reserved_to_spent(transactional_db):
    key = ApiKeyFactory.create()
    reservation = budgets.reserve(api_key_id=key.pk, amount=Decimal("0.5"))
    budgets.settle(reservation=reservation, actual=Decimal("0.125"))
    key = ApiKey.objects.get(pk=key.pk)
    assert (key.reserved_usd, key.spent_usd) == (0, Decimal("0.125"))
