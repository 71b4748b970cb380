"""Budget periods: a key whose budget resets (``ApiKey.budget_period``: each UTC day, week from Monday,
or month from the 1st) has its spend set back to zero as each period starts, by the beat task
``routing.tasks.api_keys_budget_reset``. One conditional UPDATE per kind of period resets each key once
per period, however often the beat runs and however many beats run; what calls hold in reservations
and leases stays held (it is spend of the calls running across the turn)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db.models import Q
from django.utils import timezone

from routing.access import lookups
from routing.models import ApiKey


def budget_period_start(period: str, now: datetime) -> datetime | None:
    """The start (UTC) of the budget period holding ``now``: today's midnight, this week's Monday,
    this month's 1st; None for no period."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == ApiKey.BudgetPeriod.DAY:
        return day
    if period == ApiKey.BudgetPeriod.WEEK:
        return day - timedelta(days=day.weekday())
    if period == ApiKey.BudgetPeriod.MONTH:
        return day.replace(day=1)
    return None


def api_keys_budget_reset(*, now: datetime | None = None) -> int:
    """Beat: the spend of each key whose budget period has turned goes back to zero (one conditional
    UPDATE per period kind, so a key is reset once per period however often this runs). What calls
    hold in reservations and leases stays held. Returns how many keys were reset."""
    now = now or timezone.now()
    reset = 0
    for period in (ApiKey.BudgetPeriod.DAY, ApiKey.BudgetPeriod.WEEK, ApiKey.BudgetPeriod.MONTH):
        start = budget_period_start(period, now)
        turned = ApiKey.objects.filter(budget_period=period).filter(
            Q(budget_period_start__isnull=True) | Q(budget_period_start__lt=start)
        )
        reset += turned.update(spent_usd=Decimal(0), budget_period_start=start)
    if reset:
        lookups.clear()
    return reset
