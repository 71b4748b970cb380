"""The ledger journal and the group commit (routing/ledger/writer.py runs them).

A journal is a folder per database (``LEDGER_JOURNAL_DIR/<hash of the database>``) of segments
``<process>.<n>.jsonl``: a header line, then one line per answered call: ``{"row": <ledger_row>, "key",
"cost", "lease", "reservation", "reserved"}``. A live process holds an exclusive ``flock`` on its
segments; segments nobody holds are of dead processes.

``commit`` writes a batch of calls (rows and spend) in one transaction; ``recover`` replays the
journals of dead processes through it, idempotently, and then releases their budget leases.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import DataError, IntegrityError, connection, transaction

from core import fastjson
from core.storable import storable, storable_json
from routing import budgets, conf
from routing.ledger import bulk_copy, group_commit
from routing.ledger.record import invocation_of
from routing.models import ApiKey, Invocation, RouterVersion, TaskProfile

log = logging.getLogger(__name__)

JOURNAL_VERSION = 1
REPLAY_CHUNK = 500


def journal_dir() -> Path:
    """This database's journals: a folder per database, so a journal is never replayed into another."""
    database = connection.settings_dict
    name = f"{connection.vendor}:{database.get('HOST') or ''}:{database.get('PORT') or ''}:{database['NAME']}"
    return conf.get().ledger.journal_dir / hashlib.sha256(name.encode()).hexdigest()[:16]


# --- one call's entry -------------------------------------------------------------------------------


@dataclass(eq=False)
class Entry:
    """A finished call as the writer keeps it: its ledger row, its spend and (in memory) its hold."""

    row: dict[str, Any]
    spend: budgets.Spend
    hold: budgets.Hold | None = None
    segment: Segment | None = None
    row_json: bytes = b""

    @classmethod
    def of(cls, row: dict[str, Any], hold: budgets.Hold | None, *, key_id: int) -> Entry:
        """The entry of a finished call; its row made storable first (core/storable.py: a NUL or a lone
        surrogate a caller or a model wrote would fail the insert of the whole batch)."""
        row, encoded = storable_json(row)
        reservation = hold.reservation if hold is not None else None
        spend = budgets.Spend(
            key_id=key_id,
            cost=Decimal(row["cost_usd"]),
            lease_id=hold.lease.id if hold is not None and hold.lease is not None else None,
            reservation_id=reservation.pk if reservation is not None else None,
            reserved=reservation.amount_usd if reservation is not None else Decimal(0),
        )
        return cls(row, spend, hold, row_json=encoded)

    def line(self) -> bytes:
        spend = self.spend
        data = {
            "key": spend.key_id,
            "cost": str(spend.cost),
            "lease": str(spend.lease_id) if spend.lease_id else None,
            "reservation": spend.reservation_id,
            "reserved": str(spend.reserved),
        }
        row = self.row_json or fastjson.dumps(self.row)  # the row's JSON from `of`: encoded once
        return b'{"row":' + row + b"," + fastjson.dumps(data)[1:] + b"\n"

    @classmethod
    def from_line(cls, data: dict[str, Any]) -> Entry:
        spend = budgets.Spend(
            key_id=int(data["key"]),
            cost=Decimal(data["cost"]),
            lease_id=uuid.UUID(data["lease"]) if data.get("lease") else None,
            reservation_id=data.get("reservation"),
            reserved=Decimal(data.get("reserved") or 0),
        )
        return cls(storable(data["row"]), spend)  # a journal written before rows were made storable

    @property
    def id(self) -> uuid.UUID:
        return uuid.UUID(self.row["id"])


# --- committing -------------------------------------------------------------------------------------


def commit(entries: list[Entry], *, replay: bool = False) -> int:
    """Inserts the rows of ``entries`` and flushes their spend in one transaction; returns the rows
    written. ``replay``: rows already in the ledger are skipped with their spend (the keys are locked
    first, so two replays of one journal cannot both charge it). A row whose key, profile or router
    version has gone since is left out (logged to ``rejected.log``): live, its spend is still charged
    (the tokens were spent); replayed, it is not (it may have been charged before the crash).

    A row the database refuses for its content (a value no column can hold) is never dropped: its
    accounting is written with the payload fields replaced by a note, and the whole entry is kept in
    ``unstorable.log`` with an error (an alarm: the ``skillgate_ledger_unstorable_rows`` gauge)."""
    if not entries:
        return 0
    with contextlib.suppress(*_REFUSED):
        return _commit(entries, replay=replay, check=False)
    with contextlib.suppress(*_REFUSED):
        return _commit(entries, replay=replay, check=True)
    if len(entries) > 1:  # something else is wrong with one of them: find it
        return sum(commit([entry], replay=replay) for entry in entries)
    return _commit_accounting(entries[0], replay=replay)


# What the database answers for a row it will not take (a constraint, a value a column cannot hold);
# an unreachable database (OperationalError) is not one: the writer retries that.
_REFUSED = (IntegrityError, DataError, ValueError, TypeError)  # ValueError: text a driver cannot encode


def _commit_accounting(entry: Entry, *, replay: bool) -> int:
    """The row of ``entry`` without its payload (who, what it cost, how it went), after the database
    refused it whole; the entry itself goes to ``unstorable.log``."""
    path = journal_dir() / "unstorable.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as out:
        out.write(entry.line())
    log.error(
        "ledger row %s: the database refused its content; written without it, kept in %s", entry.id, path
    )
    note = f"not stored: the database refused this call's content (kept in {path.name})"
    row = {**entry.row, "request": {"unstorable": note}, "response": None, "legs": [], "verdict_detail": note}
    row["error"] = note if entry.row.get("error") else ""
    stripped = dataclasses.replace(entry, row=row, row_json=b"")
    with contextlib.suppress(*_REFUSED):
        return _commit([stripped], replay=replay, check=True)
    # Not even that (a duplicate id): the spend is still charged live, as for a rejected row.
    _reject([entry], {entry.id}, why="was refused even without its payload")
    if not replay:
        with transaction.atomic():
            budgets.flush_spend([entry.spend])
    return 0


def _commit(entries: list[Entry], *, replay: bool, check: bool) -> int:
    spends = [entry.spend for entry in entries]
    queued = Invocation.SampleState.QUEUED
    if not (replay or check) and group_commit.applies([entry.row for entry in entries], spends):
        # The live group commit on PostgreSQL: rows and spend in one statement, one round trip.
        group_commit.write([entry.row_json or fastjson.dumps(entry.row) for entry in entries], spends)
        sampled = [entry.id for entry in entries if entry.row.get("sample_state") == queued]
        if sampled:  # outside a transaction: now, as committed
            transaction.on_commit(lambda: _enqueue_samples(sampled), robust=True)
        return len(entries)
    with transaction.atomic():
        if replay:
            keys = sorted({entry.spend.key_id for entry in entries})
            list(ApiKey.objects.select_for_update().filter(pk__in=keys).order_by("pk").values_list("pk"))
            ids = [entry.id for entry in entries]
            present = set(Invocation.objects.filter(pk__in=ids).values_list("pk", flat=True))
            entries = [entry for entry in entries if entry.id not in present]
            spends = [entry.spend for entry in entries]
        if check or replay:
            rows = [invocation_of(entry.row) for entry in entries]
            if check:
                rows, rejected = _referenced(rows)
                if rejected:
                    _reject(entries, rejected)
                    if replay:
                        spends = [entry.spend for entry in entries if entry.id not in rejected]
            Invocation.objects.bulk_create(rows, ignore_conflicts=replay)
            sampled = [row.pk for row in rows if row.sample_state == Invocation.SampleState.QUEUED]
            written = len(rows)
        else:  # live, reservation mode (or SQLite): rows as they are, by COPY on PostgreSQL
            bulk_copy.insert([entry.row for entry in entries])
            sampled = [entry.id for entry in entries if entry.row.get("sample_state") == queued]
            written = len(entries)
        budgets.flush_spend(spends)
        if sampled:
            transaction.on_commit(lambda: _enqueue_samples(sampled), robust=True)
    return written


def _referenced(rows: list[Invocation]) -> tuple[list[Invocation], set[uuid.UUID]]:
    """The rows whose key and profile exist (a router version that has gone becomes null, as its
    deletion would have made it), and the ids of the others."""
    keys = set(ApiKey.objects.filter(pk__in={r.api_key_id for r in rows}).values_list("pk", flat=True))
    wanted = {r.profile_id for r in rows}
    profiles = set(TaskProfile.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    wanted = {r.router_version_id for r in rows if r.router_version_id is not None}
    versions = set(RouterVersion.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    kept, rejected = [], set()
    for row in rows:
        if row.api_key_id not in keys or row.profile_id not in profiles:
            rejected.add(row.pk)
            continue
        if row.router_version_id is not None and row.router_version_id not in versions:
            row.router_version_id = None
        kept.append(row)
    return kept, rejected


def unstorable_count() -> int:
    """Entries of this database whose rows were written without their payload (unstorable.log)."""
    path = journal_dir() / "unstorable.log"
    try:
        with path.open("rb") as lines:
            return sum(1 for _ in lines)
    except FileNotFoundError:
        return 0


def _reject(
    entries: list[Entry], rejected: set[uuid.UUID], why: str = "refers to a key or profile that is gone"
) -> None:
    path = journal_dir() / "rejected.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as out:
        for entry in entries:
            if entry.id in rejected:
                log.error("ledger row %s %s; kept in %s", entry.id, why, path)
                out.write(entry.line())


# What enqueues the background legs of sampled rows once they are committed: routing/apps.py registers
# routing/tasks.py's (the ledger sits below the call code that runs those legs).
_sample_enqueuers: list[Callable[[list[uuid.UUID]], None]] = []


def on_sampled_rows(enqueue: Callable[[list[uuid.UUID]], None]) -> None:
    """Registers ``enqueue`` for the ids of committed rows whose sample is queued (idempotent)."""
    if enqueue not in _sample_enqueuers:
        _sample_enqueuers.append(enqueue)


def _enqueue_samples(ids: list[uuid.UUID]) -> None:
    if not _sample_enqueuers:
        log.error("%d sampled rows committed but nothing enqueues samples; the beat sweep will", len(ids))
    for enqueue in _sample_enqueuers:
        enqueue(ids)


# --- the journal --------------------------------------------------------------------------------------


class Segment:
    """One journal file of this process, flock'd while open."""

    def __init__(self, directory: Path, process: str, number: int) -> None:
        self.path = directory / f"{process}.{number:06d}.jsonl"
        # Made and locked under a temporary name, then renamed: recovery never sees it unlocked.
        temporary = directory / f".{process}.{number:06d}.tmp"
        self.fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        header = {"journal": JOURNAL_VERSION, "process": process, "segment": number}
        write_all(self.fd, json.dumps(header).encode() + b"\n")
        os.rename(temporary, self.path)
        self.size = 0
        self.outstanding = 0  # lines not committed yet

    def close(self) -> None:
        """Deletes the file (everything in it is committed), then closes it: no one can claim it between."""
        self.path.unlink(missing_ok=True)
        os.close(self.fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# --- recovery -------------------------------------------------------------------------------------------


def _process_of(path: Path) -> str:
    return path.name.rsplit(".", 2)[0]


def has_journal(process: str, *, directory: Path | None = None) -> bool:
    """Whether a journal of ``process`` is on this machine (alive, or dead and not yet replayed)."""
    return any((directory or journal_dir()).glob(f"{process}.*.jsonl"))


def _claim(path: Path) -> int | None:
    """An fd holding the lock of a journal nobody else holds, or None (a live writer, a replay in
    progress, or already replayed and deleted)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    if os.fstat(fd).st_nlink == 0:  # replayed and deleted while we waited
        os.close(fd)
        return None
    return fd


def _entries(fd: int) -> list[Entry]:
    with os.fdopen(os.dup(fd), "rb") as handle:
        data = handle.read()
    entries = []
    for raw in data.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a torn last line: its call was never answered (the line precedes the answer)
        if isinstance(line, dict) and "row" in line:
            entries.append(Entry.from_line(line))
    return entries


def recover(*, directory: Path | None = None, skip: str | None = None) -> int:
    """Replays the journals of dead processes (see the module's docstring); returns the rows written.
    Idempotent. ``skip``: the caller's own process (its journal is locked anyway: never claimed)."""
    directory = directory or journal_dir()
    groups: dict[str, list[Path]] = {}
    for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
        if _process_of(path) != skip:
            groups.setdefault(_process_of(path), []).append(path)
    written = 0
    for process, paths in groups.items():
        claimed: list[tuple[Path, int]] = []
        try:
            for path in paths:
                fd = _claim(path)
                if fd is None:
                    break  # alive (or being replayed by someone else): not ours
                claimed.append((path, fd))
            else:
                for _, fd in claimed:
                    entries = _entries(fd)
                    for start in range(0, len(entries), REPLAY_CHUNK):
                        written += commit(entries[start : start + REPLAY_CHUNK], replay=True)
                released = budgets.leases_release(process=process)
                for path, _ in claimed:
                    path.unlink(missing_ok=True)
                log.warning(
                    "replayed the journal of %s: %d rows; %d leases released", process, written, released
                )
        finally:
            for _, fd in claimed:
                os.close(fd)
    return written
