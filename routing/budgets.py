"""Spend budgets: reserve an upper bound before a call, settle the real cost after it.

The reservation is one conditional UPDATE (``spent + reserved + amount <= budget``), so
concurrent calls on the same key can never together exceed its budget; settle moves the
amount from reserved to spent in the same transaction that writes the ledger row.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from routing.errors import ApiError
from routing.models import ApiKey, Reservation


class BudgetExceeded(ApiError):
    def __init__(self, needed: Decimal) -> None:
        super().__init__(
            402,
            f"This call may cost up to ${needed:.6f}, more than is left of the key's budget.",
            type="insufficient_quota",
            code="budget_exceeded",
        )


def reserve(*, api_key_id: int, amount: Decimal) -> Reservation:
    ttl = timedelta(seconds=settings.SKILLGATE["RESERVATION_TTL_S"])
    with transaction.atomic():
        updated = (
            ApiKey.objects.filter(pk=api_key_id)
            .filter(
                Q(budget_usd__isnull=True) | Q(budget_usd__gte=F("spent_usd") + F("reserved_usd") + amount)
            )
            .update(reserved_usd=F("reserved_usd") + amount)
        )
        if not updated:
            raise BudgetExceeded(amount)
        now = timezone.now()
        return Reservation.objects.create(
            api_key_id=api_key_id, amount_usd=amount, created_at=now, expires_at=now + ttl
        )


def charge(*, api_key_id: int, actual: Decimal) -> None:
    """Charge a key without a budget, which holds no reservation (nothing to overspend)."""
    ApiKey.objects.filter(pk=api_key_id).update(spent_usd=F("spent_usd") + actual)


def settle(*, reservation: Reservation, actual: Decimal) -> None:
    """Release the reservation and charge ``actual``; call inside the ledger's transaction."""
    deleted, _ = Reservation.objects.filter(pk=reservation.pk).delete()
    released = reservation.amount_usd if deleted else Decimal(0)
    ApiKey.objects.filter(pk=reservation.api_key_id).update(
        reserved_usd=F("reserved_usd") - released, spent_usd=F("spent_usd") + actual
    )


def release_expired(*, now: datetime | None = None) -> int:
    """Give back reservations whose call never settled (a crashed server). Idempotent."""
    now = now or timezone.now()
    released = 0
    for reservation_id in Reservation.objects.filter(expires_at__lt=now).values_list("pk", flat=True):
        with transaction.atomic():
            reservation = Reservation.objects.select_for_update().filter(pk=reservation_id).first()
            if reservation is None:
                continue
            reservation.delete()
            ApiKey.objects.filter(pk=reservation.api_key_id).update(
                reserved_usd=F("reserved_usd") - reservation.amount_usd
            )
            released += 1
    return released
