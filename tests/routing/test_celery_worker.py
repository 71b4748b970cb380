"""A real Celery worker on the configured broker (Redis in CI, the file transport by default)
releases budget held by a call that never settled."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from routing import budgets
from routing.models import ApiKey, Reservation
from routing.tasks import release_stale_reservations
from tests.factories import ApiKeyFactory
from tests.support.celery_worker import Worker, celery_worker


@pytest.fixture
def worker(transactional_db: None) -> Iterator[Worker]:
    with celery_worker("reservations") as running:
        yield running


def test_worker_releases_lost_reservations(worker: Worker) -> None:
    key = ApiKeyFactory.create(budget_usd=Decimal(1))
    lost = budgets.reserve(api_key_id=key.pk, amount=Decimal("0.75"))
    Reservation.objects.filter(pk=lost.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    release_stale_reservations.delay()

    worker.wait_until("the release", lambda: not Reservation.objects.filter(pk=lost.pk).exists(), 60)
    assert ApiKey.objects.get(pk=key.pk).reserved_usd == 0
    # The budget is usable again.
    budgets.reserve(api_key_id=key.pk, amount=Decimal("0.9"))
