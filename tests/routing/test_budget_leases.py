"""Budgets by leases (routing/budgets/holds.py): calls hold against a slice of the key's budget kept in the
server process's memory, without a query, and no key spends past its budget however many processes
serve it; leases go back when idle, and a dead process's lease once its journal has been replayed."""

from __future__ import annotations

import fcntl
import os
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.support.openai_stub import Reply
from routing import budgets
from routing.budgets import leases as budget_leases
from routing.ledger import journal as ledger_journal
from routing.models import ApiKey, BudgetLease, Invocation, Reservation
from routing.pricing import cost_bound, prices_for, prompt_token_bound
from routing.tasks import release_stale_reservations
from tests.factories import ApiKeyFactory, make_key
from tests.support.gateway_process import gateway_process, journal_files

pytestmark = pytest.mark.django_db(transaction=True)

WORST = Decimal("0.01")
HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}


def book(name: str) -> budget_leases.LeaseBook:
    """A lease book as another server process on this machine keeps one."""
    return budget_leases.LeaseBook(f"{budgets.host_name()}-{name}-1", budgets.host_name())


def key_state(key: ApiKey) -> tuple[Decimal, Decimal]:
    key.refresh_from_db()
    return key.spent_usd, key.reserved_usd


def settle(lease_book: budget_leases.LeaseBook, hold: budgets.Hold, actual: Decimal) -> None:
    """A call's end as the ledger writer does it: the lease updated, the spend committed."""
    lease_book.settle(hold, actual)
    assert hold.lease is not None
    with transaction.atomic():
        budgets.flush_spend([budgets.Spend(hold.key_id, actual, hold.lease.id)])
    lease_book.flushed([(hold.lease, actual)])


def test_calls_hold_against_the_local_lease_without_a_query(transactional_db):
    key = make_key(budget_usd=Decimal(1)).key
    lease_book = book("a")
    first = lease_book.hold(key, WORST)  # takes a lease: a tenth of what is left
    lease = BudgetLease.objects.get()
    assert lease.amount_usd == Decimal("0.1") and key_state(key) == (0, Decimal("0.1"))

    with CaptureQueriesContext(connection) as queries:
        holds = [lease_book.hold(key, WORST) for _ in range(9)]
        for hold in [first, *holds]:
            lease_book.settle(hold, WORST / 2)
    assert len(queries) == 0
    with pytest.raises(budgets.BudgetExceeded):  # sanity: a key with nothing left refuses
        book("b").hold(ApiKeyFactory.create(budget_usd=Decimal("0.001")), WORST)


def test_leases_of_many_processes_never_exceed_the_budget(transactional_db):
    budget = Decimal("0.1")
    key = make_key(budget_usd=budget).key
    books = [book(f"p{i}") for i in range(3)]
    worst = Decimal("0.007")

    def attempt(i: int) -> tuple[budget_leases.LeaseBook, budgets.Hold] | None:
        lease_book = books[i % 3]
        try:
            return lease_book, lease_book.hold(key, worst)
        except budgets.BudgetExceeded:
            return None
        finally:
            connection.close()  # this thread's

    with ThreadPoolExecutor(max_workers=8) as pool:  # the event loop and Django's threads, at once
        holds = [held for held in pool.map(attempt, range(60)) if held is not None]
    leases = list(BudgetLease.objects.all())
    assert sum(lease.amount_usd for lease in leases) <= budget
    assert key_state(key) == (0, sum(lease.amount_usd for lease in leases))
    assert 10 <= len(holds) <= 14 and len(holds) * worst <= budget  # 14 fit; leases may leave crumbs

    for lease_book, hold in holds:  # each call spends its whole worst case: still within the budget
        settle(lease_book, hold, worst)
    spent, _ = key_state(key)
    assert spent == len(holds) * worst <= budget
    for lease_book in books:
        lease_book.return_idle()
    assert key_state(key) == (spent, 0) and not BudgetLease.objects.exists()


def test_a_settled_call_frees_the_rest_of_its_worst_case_and_an_idle_lease_goes_back(transactional_db):
    key = make_key(budget_usd=Decimal("0.02")).key
    lease_book = book("a")
    hold = lease_book.hold(key, WORST)
    second = lease_book.hold(key, WORST)
    with pytest.raises(budgets.BudgetExceeded):
        lease_book.hold(key, WORST)
    settle(lease_book, hold, Decimal("0.002"))
    settle(lease_book, second, Decimal("0.003"))
    third = lease_book.hold(key, WORST)  # the unspent part of both worst cases is free again
    settle(lease_book, third, Decimal("0.004"))

    lease_book.maintain()  # not idle long enough yet
    assert BudgetLease.objects.exists()
    lease_book.maintain(idle_s=0)
    assert key_state(key) == (Decimal("0.009"), 0) and not BudgetLease.objects.exists()


def test_expired_leases_are_released_only_when_their_spend_is_known(transactional_db, settings, tmp_path):
    settings.SKILLGATE = {**settings.SKILLGATE, "LEDGER_JOURNAL_DIR": tmp_path / "journal"}
    key = make_key(budget_usd=Decimal(1)).key
    here, past = budgets.host_name(), timezone.now() - timedelta(minutes=5)

    def lease(process: str, *, host: str = here, expires: Any = past) -> BudgetLease:
        ApiKey.objects.filter(pk=key.pk).update(reserved_usd=key_state(key)[1] + Decimal("0.1"))
        return BudgetLease.objects.create(
            api_key=key, process_id=process, host=host, amount_usd=Decimal("0.1"), expires_at=expires
        )

    dead = lease(f"{here}-1-1")  # a process of this machine that died; its journal is gone
    alive = lease(f"{here}-2-2")  # expired (its writer stalled) but its journal is still held
    fresh = lease(f"{here}-3-3", expires=timezone.now() + timedelta(minutes=1))
    elsewhere = lease("other-4-4", host="other")  # another machine: its journal is there
    journal = ledger_journal.journal_dir() / f"{alive.process_id}.000001.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"journal": 1}\n')
    held = os.open(journal, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        release_stale_reservations()
        assert set(BudgetLease.objects.values_list("pk", flat=True)) == {alive.pk, fresh.pk, elsewhere.pk}
        assert key_state(key)[1] == Decimal("0.3")  # the dead one's unspent 0.1 went back

        settings.SKILLGATE = {**settings.SKILLGATE, "BUDGET_LEASE_ABANDON_S": 60}
        release_stale_reservations()  # an operator wrote off what that machine's journal may hold
        assert set(BudgetLease.objects.values_list("pk", flat=True)) == {alive.pk, fresh.pk}
    finally:
        os.close(held)
    release_stale_reservations()  # its process is dead now: the journal is replayed, the lease released
    assert set(BudgetLease.objects.values_list("pk", flat=True)) == {fresh.pk} and not journal.exists()
    assert dead.pk not in set(BudgetLease.objects.values_list("pk", flat=True))


def test_the_reservation_mode_still_holds_a_row_per_call(gateway_url, backends, settings):
    settings.SKILLGATE = {**settings.SKILLGATE, "BUDGET_MODE": "reservation"}
    pair = make_key(budget_usd=Decimal(1))
    assert call(gateway_url, pair.raw).status_code == 200
    row = Invocation.objects.get()
    assert key_state(pair.key) == (row.cost_usd, 0) and row.cost_usd > 0
    assert not BudgetLease.objects.exists() and not Reservation.objects.exists()


# --- real server processes -------------------------------------------------------------------------


def call(url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions", json=HELLO, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )


@pytest.fixture
def worst_case(backends: dict[str, Any]) -> Decimal:
    """What HELLO may cost on the teacher; the stub answers max_tokens words, so nearly that."""
    body = {"messages": HELLO["messages"], "max_tokens": 50}
    prices = prices_for(backends["teacher"])
    return cost_bound(prices, prompt_tokens=prompt_token_bound(body), max_tokens=50)


@pytest.fixture
def two_servers(tmp_path: Path, stub: Any, transactional_db: None) -> Iterator[list[Any]]:
    env = {"SKILLGATE_LEDGER_WRITER": "batched", "SKILLGATE_BUDGET_LEASE_FRACTION": "0.25"}
    with (
        gateway_process("leases-a", tmp_path / "a", env) as first,
        gateway_process("leases-b", tmp_path / "b", env) as second,
    ):
        yield [first, second]


def test_two_server_processes_at_the_budget_edge_never_spend_past_it(backends, stub, worst_case, two_servers):
    budget = worst_case * 10
    pair = make_key(budget_usd=budget)
    stub.responder = lambda body: Reply(content=" ".join(["word"] * 50), delay_s=random.uniform(0.05, 0.3))

    with ThreadPoolExecutor(max_workers=16) as pool:
        responses = list(pool.map(lambda i: call(two_servers[i % 2].url, pair.raw), range(40)))
    statuses = [r.status_code for r in responses]
    assert set(statuses) == {200, 402}, statuses  # the edge was reached, and only refusals past it
    for server in two_servers:
        assert server.terminate()  # commits what it answered, returns its lease

    rows = Invocation.objects.filter(api_key=pair.key)
    assert {str(pk) for pk in rows.values_list("pk", flat=True)} == {
        r.headers["x-skillgate-invocation"] for r in responses if r.status_code == 200
    }
    spent = sum((row.cost_usd for row in rows), Decimal(0))
    assert 0 < spent <= budget
    assert key_state(pair.key) == (spent, 0) and not BudgetLease.objects.exists()


def test_a_killed_process_lease_goes_back_once_its_journal_is_replayed(backends, stub, settings, tmp_path):
    env = {
        "SKILLGATE_LEDGER_WRITER": "batched",
        "SKILLGATE_LEDGER_FLUSH_MS": "600000",  # nothing committed before the kill
        "SKILLGATE_BUDGET_LEASE_TTL_S": "1",
    }
    pair = make_key(budget_usd=Decimal(1))
    with gateway_process("leaser", tmp_path, env) as server:
        assert all(call(server.url, pair.raw).status_code == 200 for _ in range(3))
        lease = BudgetLease.objects.get(api_key=pair.key)
        server.kill()
    assert key_state(pair.key) == (0, lease.amount_usd)  # the whole lease held until recovered
    assert lease.amount_usd > 0 and not Invocation.objects.exists()

    # The beat task on this machine: the dead process's journal first, then its lease.
    settings.SKILLGATE = {**settings.SKILLGATE, "LEDGER_JOURNAL_DIR": tmp_path / "journal"}
    (journal,) = journal_files(tmp_path / "journal")
    assert journal.parent == ledger_journal.journal_dir()
    release_stale_reservations()
    spent = sum((row.cost_usd for row in Invocation.objects.filter(api_key=pair.key)), Decimal(0))
    assert Invocation.objects.count() == 3 and spent > 0
    assert key_state(pair.key) == (spent, 0) and not BudgetLease.objects.exists()
    assert not journal.exists()
