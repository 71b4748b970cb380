"""The ledger off the request path (routing/ledger/writer.py): rows group-committed after the response
behind a journal, nothing answered lost on SIGTERM, recovered from the journal after SIGKILL, and never
written (nor charged) twice, however often a journal is replayed."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.utils import timezone

from bench.support.openai_stub import Reply
from routing import budgets
from routing.budgets import leases
from routing.ledger import CallRecord, Leg, ledger_row
from routing.ledger import journal as ledger_journal
from routing.ledger import writer as ledger_writer
from routing.models import ApiKey, BudgetLease, Invocation
from tests.factories import TaskProfileFactory, make_key
from tests.support.cycle import city_prompt, drive, good, json_profile
from tests.support.gateway import by_model
from tests.support.gateway_process import gateway_process, journal_files
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
# Batched, with a group-commit window far longer than any test: nothing is committed unless flushed.
BATCHED = {"SKILLGATE_LEDGER_WRITER": "batched", "SKILLGATE_LEDGER_FLUSH_MS": "600000"}


def call(url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions", json=HELLO, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )


def answered(responses: list[httpx.Response]) -> set[str]:
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    return {r.headers["x-skillgate-invocation"] for r in responses}


def spent_and_reserved(key: ApiKey) -> tuple[Decimal, Decimal]:
    key.refresh_from_db()
    return key.spent_usd, key.reserved_usd


def ledger_cost(key: ApiKey) -> Decimal:
    return sum((row.cost_usd for row in Invocation.objects.filter(api_key=key)), Decimal(0))


@pytest.fixture
def batched(settings: Any, tmp_path: Path, transactional_db: None) -> Iterator[Path]:
    """This process's writer (the in-process test server's) batched with a long window, journaling under
    tmp_path; yields the journal folder."""
    ledger_writer.shutdown()  # a writer started earlier has the suite's settings
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "LEDGER_WRITER": "batched",
        "LEDGER_FLUSH_MS": 600_000.0,
        "LEDGER_JOURNAL_DIR": tmp_path / "journal",
    }
    yield tmp_path / "journal"
    ledger_writer.shutdown()


def test_rows_are_committed_after_the_response_with_their_spend_and_journaled_until_then(
    gateway_url, backends, stub, batched
):
    pair = make_key(budget_usd=Decimal(1))
    ids = answered([call(gateway_url, pair.raw) for _ in range(3)])

    assert not Invocation.objects.exists()  # the responses did not wait for the database
    assert spent_and_reserved(pair.key)[0] == 0
    (journal,) = journal_files(batched)
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert lines[0]["journal"] == 1 and lines[0]["process"] == budgets.process_id()
    assert {line["row"]["id"] for line in lines[1:]} == ids

    assert ledger_writer.flush()
    assert {str(pk) for pk in Invocation.objects.values_list("pk", flat=True)} == ids
    lease = BudgetLease.objects.get(api_key=pair.key)
    spent, reserved = spent_and_reserved(pair.key)
    assert spent == ledger_cost(pair.key) == lease.spent_usd > 0  # row and spend in one transaction
    assert reserved == lease.amount_usd - lease.spent_usd

    ledger_writer.drain()  # the idle lease goes back
    assert spent_and_reserved(pair.key) == (spent, 0) and not BudgetLease.objects.exists()


def test_a_sampled_row_is_enqueued_once_committed(gateway_url, backends, stub, batched, monkeypatch, api_key):
    sent: list[str] = []
    monkeypatch.setattr("routing.tasks.sample_leg.delay", sent.append)
    profile = json_profile("sampled", policy_params={"teacher_sample_rate": 1.0})
    stub.responder = by_model(good("Lima", "Peru"), good("Lima", "Peru"))
    client_rows = drive(gateway_url, api_key.raw, profile.name, [city_prompt("Lima", "Peru")])

    assert client_rows == [] and sent == []  # not committed yet: nothing to sample from
    assert ledger_writer.flush()
    row = Invocation.objects.get()
    assert (row.served_by, row.sample_state) == ("student", "queued")
    assert sent == [str(row.pk)]


# --- recovery ----------------------------------------------------------------------------------------


def dead_journal(folder: Path, process: str, key: ApiKey, lease: BudgetLease, costs: list[str]) -> Path:
    """A journal as a process killed with these calls answered but not committed leaves it."""
    profile = TaskProfileFactory.create()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{process}.000001.jsonl"
    lines = [json.dumps({"journal": 1, "process": process, "segment": 1}).encode() + b"\n"]
    for cost in costs:
        record = CallRecord(
            id=uuid.uuid4(),
            api_key_id=key.pk,
            profile_id=profile.pk,
            requested_model="auto",
            route="teacher",
            policy="always_teacher",
            score=None,
            stream=False,
            request={"messages": [{"role": "user", "content": "hi"}]},
            legs=[Leg(backend="teacher", role="teacher", model="m", cost_usd=Decimal(cost))],
            served_by="teacher",
        )
        hold = budgets.Hold(key.pk, Decimal(cost), leases.Lease(lease.pk, key.pk))
        lines.append(ledger_journal.Entry.of(ledger_row(record), hold, key_id=key.pk).line())
    lines.append(b'{"row": {"id": "torn')  # killed mid-write: that call was never answered
    path.write_bytes(b"".join(lines))
    return path


def test_a_dead_process_journal_is_replayed_once_and_its_lease_released(transactional_db, tmp_path):
    key = make_key(budget_usd=Decimal(1)).key
    process = f"{budgets.host_name()}-999999-1"
    lease = BudgetLease.objects.create(
        api_key=key,
        process_id=process,
        host=budgets.host_name(),
        amount_usd=Decimal("0.5"),
        expires_at=timezone.now() + timedelta(minutes=1),
    )
    ApiKey.objects.filter(pk=key.pk).update(reserved_usd=Decimal("0.5"))
    folder = tmp_path / "journal"
    path = dead_journal(folder, process, key, lease, ["0.01", "0.02", "0.03"])
    saved = path.read_bytes()

    assert ledger_journal.recover(directory=folder) == 3
    assert Invocation.objects.count() == 3 and not path.exists()
    # Its spend counted once, then the rest of its lease given back.
    assert spent_and_reserved(key) == (Decimal("0.06"), 0) and not BudgetLease.objects.exists()

    path.write_bytes(saved)  # replayed again (say, a crash before the file was deleted)
    assert ledger_journal.recover(directory=folder) == 0
    assert Invocation.objects.count() == 3 and spent_and_reserved(key) == (Decimal("0.06"), 0)


def test_a_journal_its_process_still_holds_is_left_alone(transactional_db, tmp_path):
    key = make_key(budget_usd=Decimal(1)).key
    process = f"{budgets.host_name()}-999998-1"
    lease = BudgetLease.objects.create(
        api_key=key,
        process_id=process,
        host=budgets.host_name(),
        amount_usd=Decimal("0.5"),
        expires_at=timezone.now() - timedelta(minutes=1),
    )
    path = dead_journal(tmp_path / "journal", process, key, lease, ["0.01"])
    held = os.open(path, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # as the live writer holds its journal
    try:
        assert ledger_journal.recover(directory=path.parent) == 0
        assert path.exists() and BudgetLease.objects.filter(pk=lease.pk).exists()
    finally:
        os.close(held)
    assert ledger_journal.recover(directory=path.parent) == 1  # once it is dead


# --- real server processes -------------------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_commits_every_answered_call_even_those_in_flight(backends, stub, tmp_path):
    pair = make_key(budget_usd=Decimal(1))
    with gateway_process("sigterm", tmp_path, BATCHED) as server:
        ids = answered([call(server.url, pair.raw) for _ in range(10)])
        assert not Invocation.objects.exists()
        stub.responder = lambda body: Reply(content="slow", delay_s=2)
        with ThreadPoolExecutor(max_workers=6) as pool:
            slow = [pool.submit(call, server.url, pair.raw) for _ in range(6)]
            wait_until(lambda: len(stub.requests) >= 16, timeout=30, what="six calls in flight")
            assert server.terminate()  # graceful: the calls in flight finish first
            ids |= answered([future.result() for future in slow])

    rows = list(Invocation.objects.values_list("pk", flat=True))
    assert len(rows) == 16 and {str(pk) for pk in rows} == ids  # each answered call, exactly once
    assert spent_and_reserved(pair.key) == (ledger_cost(pair.key), 0)
    assert not BudgetLease.objects.exists() and journal_files(tmp_path / "journal") == []


@pytest.mark.slow
def test_after_sigkill_the_next_start_replays_the_journal_and_a_second_replay_changes_nothing(
    backends, stub, tmp_path
):
    pair = make_key(budget_usd=Decimal(1))
    with gateway_process("sigkill", tmp_path, BATCHED) as server:
        ids = answered([call(server.url, pair.raw) for _ in range(5)])
        assert not Invocation.objects.exists()
        lease = BudgetLease.objects.get(api_key=pair.key)
        server.kill()
    (journal,) = journal_files(tmp_path / "journal")
    assert journal.name.startswith(lease.process_id)
    saved = journal.read_bytes()
    assert spent_and_reserved(pair.key) == (0, lease.amount_usd)  # held, nothing lost nor freed yet

    with gateway_process("restarted", tmp_path, BATCHED) as server:
        wait_until(lambda: Invocation.objects.count() == 5, timeout=60, what="the replay at start")
        assert server.terminate()
    assert {str(pk) for pk in Invocation.objects.values_list("pk", flat=True)} == ids
    spent = ledger_cost(pair.key)
    assert spent > 0 and spent_and_reserved(pair.key) == (spent, 0)
    assert not BudgetLease.objects.exists() and journal_files(tmp_path / "journal") == []

    journal.write_bytes(saved)
    assert ledger_journal.recover(directory=journal.parent) == 0
    assert Invocation.objects.count() == 5 and spent_and_reserved(pair.key) == (spent, 0)


@pytest.fixture
def full_journal_disk(batched: Path) -> Iterator[Path]:
    """The journal folder on a 64 KiB tmpfs of its own (a real file system that fills up); skipped where
    this process may not mount one (not root)."""
    batched.mkdir(parents=True)
    mounted = os.system(f"mount -t tmpfs -o size=64k tmpfs {batched} 2>/dev/null") == 0
    if not mounted:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield batched
    finally:
        ledger_writer.shutdown()
        os.system(f"umount {batched}")


def fill(folder: Path) -> None:
    """Takes every free block of the file system under ``folder``."""
    with (folder / "filler").open("wb", buffering=0) as filler, contextlib.suppress(OSError):
        while True:
            filler.write(b"x" * 512)


def test_a_full_var_disk_commits_rows_directly_and_leaves_only_whole_lines_in_the_journal(
    gateway_url, backends, stub, full_journal_disk, caplog
):
    """var/ full: every answered call still gets its one row (committed at once instead of journaled),
    the journal holds whole lines only (a part-written line is cut off), and the log says why."""
    pair = make_key(budget_usd=Decimal(1))
    first = answered([call(gateway_url, pair.raw)])  # the writer and its journal segment exist now
    fill(full_journal_disk)
    later = answered([call(gateway_url, pair.raw) for _ in range(8)])

    assert "ledger journal unwritable" in caplog.text
    assert ledger_writer.flush()
    assert {str(pk) for pk in Invocation.objects.values_list("pk", flat=True)} == first | later
    spent, _ = spent_and_reserved(pair.key)
    assert spent == ledger_cost(pair.key) > 0
    (journal,) = journal_files(full_journal_disk)
    for line in journal.read_bytes().splitlines():
        json.loads(line)  # no part-written line
    assert journal.read_bytes().endswith(b"\n")


def test_a_call_holding_nul_is_stored_and_does_not_stall_the_batch(
    gateway_url, backends, stub, batched, api_key
):
    """PostgreSQL refuses NUL in text and jsonb: one such row used to fail the COPY of its whole batch,
    and the writer retried that batch forever. A caller's NUL and a model's (in its answer) are stored as
    U+FFFD, and the calls around them land too."""
    stub.responder = lambda body: Reply(content="bad \u0000 answer")
    poisoned = call_with(gateway_url, api_key.raw, "a\u0000b")
    stub.responder = lambda body: Reply(content="ok")
    ids = answered([poisoned, call(gateway_url, api_key.raw), call(gateway_url, api_key.raw)])
    assert ledger_writer.flush(timeout=10)
    assert {str(pk) for pk in Invocation.objects.values_list("pk", flat=True)} == ids
    row = Invocation.objects.get(pk=poisoned.headers["x-skillgate-invocation"])
    assert row.request["messages"][0]["content"] == "a\ufffdb"
    assert row.response["message"]["content"] == "bad \ufffd answer"


def test_an_old_journal_line_holding_nul_is_replayed_storable():
    line = {
        "row": {"id": str(uuid.uuid4()), "error": "x\u0000", "legs": [{"detail": "\ud800"}]},
        "key": 1,
        "cost": "0",
    }
    entry = ledger_journal.Entry.from_line(json.loads(json.dumps(line)))
    assert entry.row["error"] == "x\ufffd" and entry.row["legs"] == [{"detail": "\ufffd"}]


def call_with(url: str, key: str, content: str) -> httpx.Response:
    body = {**HELLO, "messages": [{"role": "user", "content": content}]}
    return httpx.post(
        f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )
