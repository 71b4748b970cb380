"""The leases of this server process, in memory (routing/budgets/holds.py says what a lease is).

``LeaseBook`` holds each call's worst case against the process's lease of the key: no database while
the lease covers it; when it cannot, the lease grows by a conditional UPDATE (``budgets.lease_take``),
one thread per key at a time, or the call gets the 402. Settled costs are pending until the ledger
writer has committed them (``flushed``). The writer's thread calls ``maintain``: renews the lease rows
while the process lives, returns idle leases, drops holds of calls that never settled.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from routing import conf
from routing.budgets.store import (
    BudgetExceeded,
    host_name,
    lease_return,
    lease_size,
    lease_take,
    leases_renew,
    process_id,
    ttl_s,
)
from routing.models import ApiKey, Reservation

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Hold:
    """The worst case held for one call: on a lease, on a Reservation row (reservation mode), or
    nothing (``amount`` 0, a key without a budget)."""

    key_id: int
    amount: Decimal = Decimal(0)
    lease: Lease | None = None
    hold_id: int = 0
    reservation: Reservation | None = None


@dataclass(eq=False)
class Lease:
    """A lease as this process sees it. ``amount`` and ``flushed`` mirror the row's amount and spent;
    ``pending`` is what settled calls spent that is not flushed yet; ``held`` the worst cases of the
    calls in flight. ``free`` is what new calls may still hold."""

    id: uuid.UUID
    key_id: int
    amount: Decimal = Decimal(0)
    flushed: Decimal = Decimal(0)
    pending: Decimal = Decimal(0)
    held: Decimal = Decimal(0)
    holds: dict[int, tuple[Decimal, float]] = field(default_factory=dict)  # hold id -> (amount, since)
    unflushed: int = 0  # settled calls whose spend is not in the database yet
    valid_until: float = 0.0  # monotonic; past it no new call is held before the row is renewed
    last_used: float = 0.0
    closing: bool = False  # being returned: no new holds
    gone: bool = False  # its row was released elsewhere: spend still reaches the key, nothing is held

    @property
    def free(self) -> Decimal:
        return self.amount - self.flushed - self.pending - self.held


_hold_ids = itertools.count(1)


class LeaseBook:
    """This process's leases, one per key; thread-safe (the event loop, Django's sync threads and the
    ledger writer all use it). Reads and writes the database only when a lease must grow or be renewed
    (``hold``) and in ``maintain`` (the ledger writer's thread)."""

    def __init__(self, process: str, host: str) -> None:
        self.process = process
        self.host = host
        self._lock = threading.Lock()
        self._leases: dict[tuple[int, str], Lease] = {}  # (key pk, key prefix): a re-used pk is a new key
        self._retired: list[Lease] = []  # closing or gone leases that still have calls or spend
        self._key_locks: dict[int, threading.Lock] = defaultdict(threading.Lock)
        self._remaining: dict[int, Decimal] = {}  # key pk -> what was left of its budget when last seen
        self._renewed_at = time.monotonic()

    # -- the call path --

    def try_hold(self, key: ApiKey, amount: Decimal) -> Hold | None:
        """The hold of ``amount`` on this process's lease of ``key``, or None when it cannot cover it.
        No database."""
        now = time.monotonic()
        with self._lock:
            lease = self._leases.get((key.pk, key.prefix))
            if lease is None or lease.closing or lease.gone or now >= lease.valid_until:
                return None
            if lease.free < amount:
                return None
            hold_id = next(_hold_ids)
            lease.holds[hold_id] = (amount, now)
            lease.held += amount
            lease.last_used = now
            return Hold(key.pk, amount, lease, hold_id)

    def hold(self, key: ApiKey, amount: Decimal) -> Hold:
        """``try_hold``, else a bigger lease (conditional UPDATEs) and the hold on it; BudgetExceeded when
        the key's budget cannot cover the call. One thread per key at a time takes leases, so a burst
        of calls on a fresh process takes one slice, not one each."""
        while True:
            hold = self.try_hold(key, amount)
            if hold is not None:
                return hold
            with self._key_locks[key.pk]:
                hold = self.try_hold(key, amount)
                if hold is not None:
                    return hold
                self._grow(key, amount)  # raises BudgetExceeded; else the loop holds on the grown lease

    def try_extend(self, hold: Hold, amount: Decimal) -> bool:
        """Adds ``amount`` to ``hold`` (a retry of its call) when its lease has it free. No database."""
        lease = hold.lease
        if lease is None:
            return False
        now = time.monotonic()
        with self._lock:
            held = lease.holds.get(hold.hold_id)
            if held is None or lease.closing or lease.gone or now >= lease.valid_until or lease.free < amount:
                return False
            lease.holds[hold.hold_id] = (held[0] + amount, held[1])
            lease.held += amount
            lease.last_used = now
            hold.amount += amount
            return True

    def extend(self, key: ApiKey, hold: Hold, amount: Decimal) -> bool:
        """``try_extend``, else the lease grown (conditional UPDATEs) and the hold extended on it; False
        when the key's budget cannot cover ``amount`` more (or the hold's lease was replaced)."""
        while True:
            if self.try_extend(hold, amount):
                return True
            with self._key_locks[key.pk]:
                if self.try_extend(hold, amount):
                    return True
                with self._lock:
                    current = self._leases.get((key.pk, key.prefix))
                if current is not hold.lease:
                    return False  # the lease the hold is on is being returned: no more on it
                try:
                    self._grow(key, amount)
                except BudgetExceeded:
                    return False
                with self._lock:
                    if self._leases.get((key.pk, key.prefix)) is not hold.lease:
                        return False

    def _grow(self, key: ApiKey, amount: Decimal) -> None:
        with self._lock:
            lease = self._leases.get((key.pk, key.prefix))
            usable = lease is not None and not lease.closing and not lease.gone
            lapsed = usable and lease is not None and time.monotonic() >= lease.valid_until
        if lapsed and lease is not None:
            self.renew([lease])
            usable = not lease.gone
        free = lease.free if usable and lease is not None else Decimal(0)
        needed = amount - max(free, Decimal(0))
        remaining = self._remaining.get(key.pk)
        if remaining is None and key.budget_usd is not None:
            remaining = key.budget_usd - key.spent_usd - key.reserved_usd  # as cached: a first estimate
        size = lease_size(needed=needed, remaining=remaining)
        started = time.monotonic()
        row_id = lease.id if usable and lease is not None else None
        taken, row_id, left = lease_take(
            key_id=key.pk, lease_id=row_id, size=size, needed=needed, process=self.process, host=self.host
        )
        valid_until = started + ttl_s() / 2
        with self._lock:
            self._remaining[key.pk] = left
            if lease is not None and usable and lease.id == row_id:
                lease.amount += taken
                lease.valid_until = max(lease.valid_until, valid_until)
                return
            if lease is not None:
                self._retire(lease)
            self._leases[(key.pk, key.prefix)] = Lease(
                row_id, key.pk, amount=taken, valid_until=valid_until, last_used=started
            )

    def settle(self, hold: Hold, actual: Decimal) -> None:
        """The call is over: its real cost replaces its worst case in the lease, pending until flushed."""
        lease = hold.lease
        if lease is None:
            return
        with self._lock:
            held = lease.holds.pop(hold.hold_id, None)
            if held is not None:  # else dropped by ``maintain`` as lost (older than RESERVATION_TTL_S)
                lease.held -= held[0]
            lease.pending += actual
            lease.unflushed += 1
            lease.last_used = time.monotonic()

    def flushed(self, spent: Iterable[tuple[Lease, Decimal]]) -> None:
        """Settled spend is in the database now (committed with its ledger rows)."""
        with self._lock:
            for lease, amount in spent:
                lease.pending -= amount
                lease.flushed += amount
                lease.unflushed -= 1

    # -- the ledger writer's thread --

    def maintain(self, *, idle_s: float | None = None) -> None:
        """Renews the rows of the leases held (their ``expires_at``), drops holds older than
        RESERVATION_TTL_S (a call that never settled, as beat releases a lost Reservation) and returns
        leases idle for BUDGET_LEASE_IDLE_S. Database errors propagate; the writer retries later."""
        now = time.monotonic()
        hold_ttl = float(conf.get().budgets.reservation_ttl_s)
        idle = conf.get().budgets.lease_idle_s if idle_s is None else idle_s
        with self._lock:
            for lease in self._all():
                for hold_id, (amount, since) in list(lease.holds.items()):
                    if now - since > hold_ttl:
                        del lease.holds[hold_id]
                        lease.held -= amount
            for slot, lease in list(self._leases.items()):
                busy = lease.gone or lease.held or lease.unflushed
                if not busy and now - lease.last_used >= idle:
                    del self._leases[slot]
                    self._retire(lease)
            renew = now - self._renewed_at >= ttl_s() / 4
            live = [lease for lease in self._leases.values() if not lease.gone]
            done = [lease for lease in self._retired if not lease.held and not lease.unflushed]
            self._retired = [lease for lease in self._retired if lease not in done]
        to_return = [lease for lease in done if lease.closing]  # a gone one has nothing left to return
        try:
            if renew and live:
                self.renew(live)
            while to_return:
                lease_return(to_return[0].id)
                to_return.pop(0)
        finally:
            with self._lock:
                self._retired.extend(to_return)  # what a database error left: tried again next time

    def renew(self, leases: list[Lease]) -> None:
        """Pushes the rows' ``expires_at`` forward; a lease whose row is gone is no longer used."""
        started = time.monotonic()
        self._renewed_at = started
        present = leases_renew([lease.id for lease in leases])
        with self._lock:
            for lease in leases:
                if lease.id in present:
                    lease.valid_until = max(lease.valid_until, started + ttl_s() / 2)
                else:
                    lease.gone = True
                    log.warning("budget lease %s of key %s was released elsewhere", lease.id, lease.key_id)

    def return_idle(self) -> None:
        """Returns every lease with no call in flight and nothing left to flush (shutdown, tests)."""
        self.maintain(idle_s=0.0)

    def _retire(self, lease: Lease) -> None:
        if not lease.gone:
            lease.closing = True
        if lease not in self._retired:
            self._retired.append(lease)

    def _all(self) -> list[Lease]:
        return [*self._leases.values(), *self._retired]

    def snapshot(self) -> list[Lease]:
        with self._lock:
            return list(self._all())


_book: LeaseBook | None = None
_book_lock = threading.Lock()
# Run each time the book is asked for: the ledger writer registers its start here (routing/apps.py), since
# its thread renews and returns the leases and flushes their spend (routing/ledger/writer.py).
_on_book: list[Callable[[], object]] = []


def on_book(start: Callable[[], object]) -> None:
    """Registers ``start`` to run whenever the book is asked for (idempotent: registered once)."""
    if start not in _on_book:
        _on_book.append(start)


def book() -> LeaseBook:
    """This process's lease book (a new one after a fork); asking for it starts what registered with
    ``on_book`` (the ledger writer, which renews and returns the leases: routing/ledger/writer.py)."""
    global _book
    current = _book
    if current is None or current.process != process_id():  # the lock only to make one: not per call
        with _book_lock:
            if _book is None or _book.process != process_id():
                _book = LeaseBook(process_id(), host_name())
            current = _book
    for start in _on_book:
        start()
    return current


def current_book() -> LeaseBook | None:
    return _book if _book is not None and _book.process == process_id() else None
