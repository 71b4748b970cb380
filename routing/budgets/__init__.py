"""Spend budgets: no call spends past its key's budget, however many server processes serve the key.

Two ways to hold a call's worst case before it runs (``routing.conf.get().budgets.mode``):

``lease`` (the default): budgets without a round trip. A server process takes a *lease*, a slice of
the key's remaining budget, with one conditional UPDATE (``spent + reserved + slice <= budget`` ->
``reserved += slice``, and a BudgetLease row), and keeps it in memory (routing/budgets/leases.py). Each
call holds its worst case against the local lease: no query for a call the lease covers. When it
cannot, the lease grows by one more conditional UPDATE, or the call gets the 402 (``BudgetExceeded``).
Settling replaces
the worst case by the real cost in the lease; the cost reaches the database with the call's ledger row,
in the same transaction (``flush_spend``, called by routing/ledger/writer.py): ``key.spent += cost``,
``key.reserved -= cost``, ``lease.spent += cost``. A lease idle for ``BUDGET_LEASE_IDLE_S`` goes back
(``key.reserved -= amount - spent``), so do a process's leases when it stops; those of a process that
died are released after its ledger journal has been replayed (routing/ledger/journal.py ``recover``).

No key can overspend: the leases of a key together never exceed ``budget - spent`` (the UPDATE's
condition, checked by the database), and a process never holds more than its leases (the book's
``free`` under its lock); a real cost is never more than the worst case held for it.

``reservation`` (the previous path): a conditional UPDATE plus a Reservation row before each call,
settled with the ledger row, released by Celery beat when lost. Kept for comparison and as a fallback.

A call that must try again (an upstream retry after an attempt that may have been billed) first holds that
attempt's worst case more (``extend``); when the key cannot cover it, the attempt is not made.

Keys without a budget hold nothing; their spend is charged with the ledger row.
"""

from routing.budgets.holds import extend, hold
from routing.budgets.leases import Hold, LeaseBook
from routing.budgets.store import (
    BudgetExceeded,
    Spend,
    charge,
    flush_spend,
    host_name,
    leases_release,
    leases_release_expired,
    process_id,
    release_expired,
    reserve,
    settle,
    to_cents,
)

__all__ = [
    "BudgetExceeded",
    "Hold",
    "LeaseBook",
    "Spend",
    "charge",
    "extend",
    "flush_spend",
    "hold",
    "host_name",
    "leases_release",
    "leases_release_expired",
    "process_id",
    "release_expired",
    "reserve",
    "settle",
    "to_cents",
]
