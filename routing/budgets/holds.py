"""The hold of one call: its worst case, held on this process's lease of the key (routing/budgets/leases.py)
or, in ``reservation`` mode, on a Reservation row (routing/budgets/store.py)."""

from __future__ import annotations

from decimal import Decimal

from core.db import run_sync
from routing.budgets import leases
from routing.budgets.leases import Hold
from routing.budgets.store import bound_to_cents, mode, reserve
from routing.models import ApiKey


async def hold(*, api_key: ApiKey, amount: Decimal) -> Hold:
    """Holds ``amount`` for one call of ``api_key`` (a key with a budget); BudgetExceeded when it cannot."""
    amount = bound_to_cents(amount)
    if mode() == "reservation":
        reservation = await run_sync(reserve, api_key_id=api_key.pk, amount=amount)
        return Hold(api_key.pk, amount, reservation=reservation)
    lease_book = leases.book()
    fast = lease_book.try_hold(api_key, amount)
    return fast if fast is not None else await run_sync(lease_book.hold, api_key, amount)
