"""The budget rows: the keys' ``spent`` and ``reserved``, the lease rows and the reservations, each changed
by one conditional UPDATE (the package's face, routing/budgets/__init__.py, says how they fit together)."""

from __future__ import annotations

import logging
import os
import re
import socket
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from functools import cache

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from core.money import money_display
from routing import conf
from routing.errors import ApiError
from routing.models import ApiKey, BudgetLease, Reservation

log = logging.getLogger(__name__)

CENT = Decimal("0.00000001")  # the ledger's precision (eight decimals, routing/models.py money)


class BudgetExceeded(ApiError):
    def __init__(self, needed: Decimal) -> None:
        super().__init__(
            402,
            f"This call may cost up to {money_display(needed)}, more than is left of the key's budget.",
            type="insufficient_quota",
            code="budget_exceeded",
        )


def to_cents(amount: Decimal) -> Decimal:
    """A cost as the ledger stores it (eight decimals), so sums in memory equal sums of rows."""
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def bound_to_cents(amount: Decimal) -> Decimal:
    """A worst case rounded up: what is held is never less than what may be spent."""
    return amount.quantize(CENT, rounding=ROUND_CEILING)


def mode() -> str:
    return conf.get().budgets.mode


# --- this process ---------------------------------------------------------------------------------

_identity: tuple[int, str, str] | None = None


def host_name() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def process_id() -> str:
    """``<host>-<pid>-<start ms>``: names this process's leases and its ledger journal; a new value
    after a fork, and never the same for two processes (pids are reused, start times are not)."""
    global _identity
    pid = os.getpid()
    if _identity is None or _identity[0] != pid:
        _identity = (pid, host_name(), f"{host_name()}-{pid}-{int(time.time() * 1000)}")
    return _identity[2]


def ttl_s() -> float:
    return float(conf.get().budgets.lease_ttl_s)


def lease_size(*, needed: Decimal, remaining: Decimal | None) -> Decimal:
    """How much a new or growing lease asks for: what the call needs at least, else a share
    (BUDGET_LEASE_FRACTION) of what was last seen left of the budget, at most BUDGET_LEASE_MAX_USD.
    Near the budget's edge that is just the call's worst case: slices stay small where they matter."""
    budgets = conf.get().budgets
    fraction = Decimal(str(budgets.lease_fraction))
    cap = budgets.lease_max_usd
    want = min(max(remaining or Decimal(0), Decimal(0)) * fraction, cap)
    return bound_to_cents(max(needed, want))


# --- leases in the database -------------------------------------------------------------------------


def _fits(amount: Decimal) -> Q:
    return Q(budget_usd__isnull=True) | Q(budget_usd__gte=F("spent_usd") + F("reserved_usd") + amount)


def lease_take(
    *, key_id: int, lease_id: uuid.UUID | None, size: Decimal, needed: Decimal, process: str, host: str
) -> tuple[Decimal, uuid.UUID, Decimal]:
    """Adds ``size`` (else just ``needed``) of the key's budget to a lease: the existing row
    ``lease_id`` or a new one. Returns (taken, lease id, what is left of the budget). One transaction:
    the conditional UPDATE of the key, the lease row, a read of what is left."""
    expires = timezone.now() + timedelta(seconds=ttl_s())
    with transaction.atomic():
        taken = None
        for amount in dict.fromkeys((size, needed)):
            held = ApiKey.objects.filter(_fits(amount), pk=key_id)
            if held.update(reserved_usd=F("reserved_usd") + amount):
                taken = amount
                break
        if taken is None:
            raise BudgetExceeded(needed)
        grown = lease_id is not None and BudgetLease.objects.filter(pk=lease_id).update(
            amount_usd=F("amount_usd") + taken, expires_at=expires
        )
        if not grown:
            lease_id = BudgetLease.objects.create(
                api_key_id=key_id, process_id=process, host=host, amount_usd=taken, expires_at=expires
            ).pk
        budget, spent, reserved = ApiKey.objects.values_list("budget_usd", "spent_usd", "reserved_usd").get(
            pk=key_id
        )
    assert lease_id is not None
    left = (budget - spent - reserved) if budget is not None else Decimal(0)
    return taken, lease_id, left


def leases_renew(ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Renews these lease rows; returns the ids that still exist."""
    if not ids:
        return set()
    expires = timezone.now() + timedelta(seconds=ttl_s())
    if BudgetLease.objects.filter(pk__in=ids).update(expires_at=expires) == len(ids):
        return set(ids)
    return set(BudgetLease.objects.filter(pk__in=ids).values_list("pk", flat=True))


def _release(lease: BudgetLease) -> None:
    ApiKey.objects.filter(pk=lease.api_key_id).update(
        reserved_usd=F("reserved_usd") - (lease.amount_usd - lease.spent_usd)
    )
    lease.delete()


def lease_return(lease_id: uuid.UUID) -> bool:
    """Gives back what a lease holds and did not spend; idempotent. Locks the key, then the lease (the
    order of lease_take and flush_spend)."""
    key_id = BudgetLease.objects.filter(pk=lease_id).values_list("api_key_id", flat=True).first()
    if key_id is None:
        return False
    with transaction.atomic():
        list(ApiKey.objects.select_for_update().filter(pk=key_id).values_list("pk"))
        lease = BudgetLease.objects.select_for_update().filter(pk=lease_id).first()
        if lease is None:
            return False
        _release(lease)
    return True


def leases_release(*, process: str) -> int:
    """Releases every lease of ``process`` (a dead one whose journal has been replayed, or this one
    as it stops); returns how many."""
    released = 0
    for lease_id in BudgetLease.objects.filter(process_id=process).values_list("pk", flat=True):
        released += lease_return(lease_id)
    return released


def leases_release_expired(*, unrecovered: Callable[[str], bool], now: datetime | None = None) -> int:
    """Beat: releases expired leases whose spend is known to be in the database.

    A lease is renewed while its process lives, so an expired one belongs to a process that died (or
    lost the database). Calls it answered but had not flushed are in its journal, on its machine: a
    lease of this machine is released once no journal of its process is left (``unrecovered`` says
    whether one is: run ``ledger_journal.recover`` first). A lease of another machine keeps its whole
    amount counted as spent until that machine replays its journal (any server start or beat there),
    or, when BUDGET_LEASE_ABANDON_S is set, until it has been expired that long: then what its journal
    may still hold is written off. The safe default (0) never writes anything off.
    """
    now = now or timezone.now()
    here = host_name()
    abandon_s = float(conf.get().budgets.lease_abandon_s)
    released = 0
    expired = BudgetLease.objects.filter(expires_at__lt=now).only("pk", "host", "process_id", "expires_at")
    for lease in expired:
        if lease.host == here:
            if unrecovered(lease.process_id):
                continue
        elif not abandon_s or (now - lease.expires_at).total_seconds() < abandon_s:
            continue
        released += lease_return(lease.pk)
    return released


# --- spend, flushed with the ledger rows -------------------------------------------------------------


@dataclass(frozen=True)
class Spend:
    """What one settled call spent, as the ledger writer flushes it (also from a replayed journal)."""

    key_id: int
    cost: Decimal
    lease_id: uuid.UUID | None = None
    reservation_id: int | None = None
    reserved: Decimal = Decimal(0)  # the Reservation's amount


@cache
def _key_spend_sql() -> str:
    q = connection.ops.quote_name
    return (
        f"UPDATE {q(ApiKey._meta.db_table)} SET {q('spent_usd')} = {q('spent_usd')} + %s, "
        f"{q('reserved_usd')} = {q('reserved_usd')} - %s WHERE {q('id')} = %s"
    )


@cache
def _lease_spend_sql() -> str:
    q = connection.ops.quote_name
    table = q(BudgetLease._meta.db_table)
    return f"UPDATE {table} SET {q('spent_usd')} = {q('spent_usd')} + %s WHERE {q('id')} = %s"


def _uuid_as_hex() -> bool:
    """Django stores a UUIDField as 32 hex characters where the database has no uuid type (SQLite)."""
    return not connection.features.has_native_uuid_field


def flush_spend(spends: Iterable[Spend]) -> None:
    """Moves settled spend into the database, inside the caller's transaction (the ledger rows'):
    per lease ``spent += s`` and its key's ``reserved -= s``, per key ``spent += all``; a Reservation is
    settled as before. A lease whose row is gone (released elsewhere, which gave back its whole unspent
    amount) only adds to the key's spent."""
    per_lease: dict[tuple[uuid.UUID, int], Decimal] = defaultdict(Decimal)
    spent: dict[int, Decimal] = defaultdict(Decimal)
    reserved: dict[int, Decimal] = defaultdict(Decimal)
    for spend in spends:
        spent[spend.key_id] += spend.cost
        if spend.lease_id is not None:
            per_lease[(spend.lease_id, spend.key_id)] += spend.cost
            reserved[spend.key_id] += spend.cost
        elif spend.reservation_id is not None:
            settled = Reservation.objects.filter(pk=spend.reservation_id).delete()[0]
            reserved[spend.key_id] += spend.reserved if settled else 0  # 0: beat released it first
    # Keys first (in one order), then leases, as lease_take and lease_return lock them: no deadlock.
    # Plain SQL: the writer runs this on every group commit, and the ORM's update() costs ~0.15 ms of
    # CPU to compile each time.
    with connection.cursor() as cursor:
        for key_id in sorted(spent.keys() | reserved.keys()):
            if spent[key_id] or reserved[key_id]:
                cursor.execute(_key_spend_sql(), [spent[key_id], reserved[key_id], key_id])
        for (lease_id, key_id), amount in sorted(per_lease.items(), key=lambda item: str(item[0][0])):
            if not amount:
                continue
            cursor.execute(_lease_spend_sql(), [amount, lease_id.hex if _uuid_as_hex() else lease_id])
            if not cursor.rowcount:
                # Gone: its release gave back all it had not spent, this included; charge it, hold nothing.
                ApiKey.objects.filter(pk=key_id).update(reserved_usd=F("reserved_usd") + amount)


# --- the reservation path (BUDGET_MODE "reservation") ---------------------------------------------


def reserve(*, api_key_id: int, amount: Decimal) -> Reservation:
    ttl = timedelta(seconds=conf.get().budgets.reservation_ttl_s)
    with transaction.atomic():
        updated = ApiKey.objects.filter(_fits(amount), pk=api_key_id).update(
            reserved_usd=F("reserved_usd") + amount
        )
        if not updated:
            raise BudgetExceeded(amount)
        now = timezone.now()
        return Reservation.objects.create(
            api_key_id=api_key_id, amount_usd=amount, created_at=now, expires_at=now + ttl
        )


def reservation_extend(*, reservation: Reservation, amount: Decimal) -> bool:
    """Adds ``amount`` to a call's reservation (a retry) when the key's budget has it; else False."""
    with transaction.atomic():
        updated = ApiKey.objects.filter(_fits(amount), pk=reservation.api_key_id).update(
            reserved_usd=F("reserved_usd") + amount
        )
        if not updated:
            return False
        if not Reservation.objects.filter(pk=reservation.pk).update(amount_usd=F("amount_usd") + amount):
            transaction.set_rollback(True)  # released already (lost, by beat): nothing to add to
            return False
    reservation.amount_usd += amount
    return True


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
