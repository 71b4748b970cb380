"""The hold of one call: its worst case, held on this process's lease of the key (routing/budgets/leases.py)
or, in ``reservation`` mode, on a Reservation row (routing/budgets/store.py)."""

from __future__ import annotations

from decimal import Decimal

from core.db import run_sync
from routing.budgets import leases
from routing.budgets.leases import Hold
from routing.budgets.store import bound_to_cents, mode, reservation_extend, reserve
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


async def extend(*, api_key: ApiKey, hold: Hold, amount: Decimal) -> bool:
    """Holds ``amount`` more for the call of ``hold`` (another attempt: a retry); False when the key's
    budget cannot cover it, and then the attempt is not made."""
    amount = bound_to_cents(amount)
    if hold.reservation is not None:
        reservation = hold.reservation
        extended = await run_sync(reservation_extend, reservation=reservation, amount=amount)
        if extended:
            hold.amount += amount
        return extended
    if hold.lease is None:
        return False
    lease_book = leases.book()
    if lease_book.try_extend(hold, amount):
        return True
    return await run_sync(lease_book.extend, api_key, hold, amount)
