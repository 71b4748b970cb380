"""The day's cap on background samples (``SampleSpend``): a sample, or a judge's question about one,
holds its worst case on the profile's row for the day before it is sent, may hold one more attempt for a
retry, and settles to what it cost. Shared by routing/call/sampling.py and routing/call/judging.py (which
sampling calls)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db.models import F

from routing.models import SampleSpend


def spend_reserve(*, profile_id: int, day: Any, amount: Decimal, cap: Decimal) -> bool:
    SampleSpend.objects.get_or_create(profile_id=profile_id, day=day)
    return (
        SampleSpend.objects.filter(profile_id=profile_id, day=day, spent_usd__lte=cap - amount).update(
            spent_usd=F("spent_usd") + amount, calls=F("calls") + 1
        )
        == 1
    )


def spend_extend(*, profile_id: int, day: Any, amount: Decimal, cap: Decimal) -> bool:
    """One more attempt of a running sample on the day's spend, when the cap has room for it."""
    return bool(
        SampleSpend.objects.filter(profile_id=profile_id, day=day, spent_usd__lte=cap - amount).update(
            spent_usd=F("spent_usd") + amount
        )
    )


def spend_settle(*, profile_id: int, day: Any, reserved: Decimal, actual: Decimal) -> None:
    SampleSpend.objects.filter(profile_id=profile_id, day=day).update(
        spent_usd=F("spent_usd") - reserved + actual
    )
