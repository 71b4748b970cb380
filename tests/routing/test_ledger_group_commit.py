"""The live group commit on PostgreSQL (routing/ledger/group_commit.py): a batch's rows and spend in one
statement, so one round trip; the spend exact, a gone lease charged to its key only, and the keys
locked before any lease (the order of lease_take and lease_return: no deadlock)."""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from routing import budgets
from routing.budgets import leases
from routing.ledger import CallRecord, Leg, invocation_of, ledger_row
from routing.ledger import journal as ledger_journal
from routing.models import ApiKey, BudgetLease, Invocation, TaskProfile
from tests.factories import TaskProfileFactory, make_key
from tests.routing.test_ledger_rows_fast import a_row, stored

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture(autouse=True)
def _postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the one-statement group commit is PostgreSQL's (SQLite has no round trips)")


def a_lease(key: ApiKey, amount: str) -> BudgetLease:
    ApiKey.objects.filter(pk=key.pk).update(reserved_usd=Decimal(amount))
    return BudgetLease.objects.create(
        api_key=key,
        process_id=f"{budgets.host_name()}-1-1",
        host=budgets.host_name(),
        amount_usd=Decimal(amount),
        expires_at=timezone.now() + timedelta(minutes=5),
    )


def entry(key: ApiKey, lease: BudgetLease | None, cost: str) -> ledger_journal.Entry:
    record = CallRecord(
        id=uuid.uuid4(),
        api_key_id=key.pk,
        profile_id=TaskProfileFactory.create().pk,
        requested_model="auto",
        route="teacher",
        policy="always_teacher",
        score=None,
        stream=False,
        request={"messages": [{"role": "user", "content": "hi"}]},
        legs=[Leg(backend="teacher", role="teacher", model="m", cost_usd=Decimal(cost))],
        served_by="teacher",
    )
    hold = budgets.Hold(key.pk, Decimal(cost), leases.Lease(lease.pk, key.pk)) if lease is not None else None
    return ledger_journal.Entry.of(ledger_row(record), hold, key_id=key.pk)


def state(key: ApiKey) -> tuple[Decimal, Decimal]:
    key.refresh_from_db()
    return key.spent_usd, key.reserved_usd


@contextmanager
def round_trips() -> Iterator[list[int]]:
    """Counts this connection's round trips (libpq's trace: each server turn ends in ReadyForQuery, or
    CopyInResponse where a COPY waits for its data)."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    counted: list[int] = []
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        try:
            yield counted
        finally:
            pgconn.untrace()
        trace.seek(0)
        ends = ("ReadyForQuery", "CopyInResponse")
        turns = [line for line in trace if "\tB\t" in line and any(end in line for end in ends)]
    counted.append(len(turns))


def test_a_batch_of_two_keys_is_one_round_trip_with_its_spend_exact() -> None:
    one, two = make_key(budget_usd=Decimal(1)).key, make_key(budget_usd=Decimal(1)).key
    lease_one, lease_two = a_lease(one, "0.5"), a_lease(two, "0.25")
    unbudgeted = make_key().key
    batch = [
        entry(one, lease_one, "0.01"),
        entry(two, lease_two, "0.02"),
        entry(one, lease_one, "0.03"),
        entry(unbudgeted, None, "0.04"),
        entry(two, lease_two, "0"),
    ]

    with round_trips() as counted:
        assert ledger_journal.commit(batch) == 5
    assert counted == [1]

    assert Invocation.objects.count() == 5
    assert state(one) == (Decimal("0.04"), Decimal("0.46"))
    assert state(two) == (Decimal("0.02"), Decimal("0.23"))
    assert state(unbudgeted) == (Decimal("0.04"), 0)
    lease_one.refresh_from_db()
    lease_two.refresh_from_db()
    assert (lease_one.spent_usd, lease_two.spent_usd) == (Decimal("0.04"), Decimal("0.02"))


def test_a_gone_lease_only_adds_to_its_keys_spent() -> None:
    key = make_key(budget_usd=Decimal(1)).key
    lease = a_lease(key, "0.5")
    batch = [entry(key, lease, "0.01")]
    # Released elsewhere (beat, say): its whole unspent amount went back, this call's cost included.
    BudgetLease.objects.filter(pk=lease.pk).delete()
    ApiKey.objects.filter(pk=key.pk).update(reserved_usd=0)

    assert ledger_journal.commit(batch) == 1
    assert state(key) == (Decimal("0.01"), 0) and Invocation.objects.count() == 1


def test_a_batch_writes_what_bulk_create_writes() -> None:
    for changes in ({}, {"response": None, "score": None, "router_version_id": None}):
        fast = a_row(**changes)
        slow = {**fast, "id": str(uuid.uuid4())}
        assert ledger_journal.commit([ledger_journal.Entry.of(fast, None, key_id=fast["api_key_id"])]) == 1
        Invocation.objects.bulk_create([invocation_of(slow)])
        assert stored(fast["id"]) == stored(slow["id"])
        assert Invocation.objects.get(pk=fast["id"]).sample_attempts == 0  # a default the row lacks


def test_the_keys_are_locked_before_any_lease() -> None:
    key = make_key(budget_usd=Decimal(1)).key
    lease = a_lease(key, "0.5")
    batch = [entry(key, lease, "0.01")]
    db = connection.settings_dict
    where = {"dbname": db["NAME"], "host": db["HOST"], "port": db["PORT"] or None, "user": db["USER"]}
    with psycopg.connect(**where, password=db["PASSWORD"] or None) as other:
        other.execute("SELECT id FROM routing_apikey WHERE id = %s FOR UPDATE", [key.pk])
        done: list[int] = []

        def commit() -> None:
            try:
                done.append(ledger_journal.commit(batch))
            finally:
                connection.close()  # this thread's

        committer = threading.Thread(target=commit)
        committer.start()
        try:
            waiting = 0
            for _ in range(200):  # until the commit waits for the key
                waiting = other.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock' "
                    "AND pid <> pg_backend_pid()"
                ).fetchone()[0]
                if waiting:
                    break
                time.sleep(0.02)
            assert waiting
            # It waits on the key and has not touched the lease: another transaction can take it.
            other.execute("SELECT id FROM routing_budgetlease WHERE id = %s FOR UPDATE NOWAIT", [lease.pk])
        finally:
            other.rollback()
            committer.join(10)
    assert done == [1]
    assert state(key) == (Decimal("0.01"), Decimal("0.49"))


def test_a_row_whose_profile_is_gone_fails_the_statement_and_the_batch_is_written_without_it() -> None:
    key = make_key(budget_usd=Decimal(1)).key
    lease = a_lease(key, "0.5")
    kept, orphan = entry(key, lease, "0.01"), entry(key, lease, "0.02")
    TaskProfile.objects.filter(pk=orphan.row["profile_id"]).delete()

    assert ledger_journal.commit([kept, orphan]) == 1  # the foreign key refused it at commit: no half
    assert list(Invocation.objects.values_list("pk", flat=True)) == [kept.id]
    assert state(key) == (Decimal("0.03"), Decimal("0.47"))  # live: its tokens were spent all the same
    lease.refresh_from_db()
    assert lease.spent_usd == Decimal("0.03")
