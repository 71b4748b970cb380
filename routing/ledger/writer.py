"""Ledger rows off the request path: each server process group-commits them behind a local journal.

``routing.conf.get().ledger.writer`` (SKILLGATE_LEDGER_WRITER):

- ``"sync"``: a call's row and its spend are committed in one transaction before its response.
- ``"batched"``: the call's row is appended to this process's journal (one JSON line, written to the
  OS before the response is sent) and queued. The writer thread commits the queue LEDGER_FLUSH_MS
  after its first entry (at once past LEDGER_BATCH_MAX rows): one transaction with every row
  (``bulk_create``) and the spend of those calls (routing/budgets/holds.py ``flush_spend``: the keys'
  ``spent``, the leases' ``spent``), so a row is in the ledger exactly when its cost is in the budget.
  Sampled rows get their background leg enqueued once committed (routing/call/sampling.py).

The journal (routing/ledger/journal.py): ``LEDGER_JOURNAL_DIR/<database>/<process>.<n>.jsonl``, held
under an exclusive ``flock`` while the process lives. A segment past LEDGER_JOURNAL_ROTATE_BYTES is
followed by a new one, and deleted once all its rows are committed; at a clean stop (SIGTERM: uvicorn's
lifespan shutdown, else ``atexit``) everything is committed, the idle leases returned, the journal deleted.

Recovery (``ledger_journal.recover``, at every writer start, so every server start, and in the beat task
that releases stale reservations): the journals nobody holds are of dead processes (SIGKILL, OOM). Their
lines are inserted with ``bulk_create(ignore_conflicts=True)`` keyed by the Invocation id, each with its
spend, in a transaction that first locks the keys and skips ids already in the ledger: a row is never
written twice and a cost never charged twice, however often a journal is replayed. Then the dead
process's leases are released (their unspent part goes back) and its journal deleted.

What a crash can lose. SIGKILL of the process: nothing answered (the lines are in the OS). An OS crash
or power loss: with LEDGER_JOURNAL_FSYNC "batch" (default) the lines the writer had not yet fsync'd, i.e.
calls answered within the last group-commit window (LEDGER_FLUSH_MS plus the commit); "always" fsyncs each
line before the response (nothing answered is lost, one fsync per call); "off" leaves it to the OS.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.db import connection

from routing import budgets, conf
from routing.budgets import leases as budget_leases
from routing.ledger.journal import Entry, Segment, commit, journal_dir, recover, write_all
from routing.ledger.record import CallRecord, ledger_row

log = logging.getLogger(__name__)


def writer_mode() -> str:
    return conf.get().ledger.writer


class WriterStopped(RuntimeError):
    pass


class JournalUnwritable(WriterStopped):
    """The journal cannot take the row (``var/`` full, read-only, gone): it is committed at once instead."""


class LedgerWriter:
    """This process's writer: the journal, the queue, and the thread that commits the queue and keeps
    the process's budget leases (renews them, returns idle ones: routing/budgets/leases.py ``maintain``)."""

    def __init__(self, *, process: str, directory: Path) -> None:
        self.process = process
        self.directory = directory
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._done_changed = threading.Condition(self._lock)
        self._queue: list[Entry] = []
        self._committing: list[Entry] = []  # the batch being committed now
        self._submitted = 0
        self._done = 0
        self._wake = threading.Event()  # the queue has something
        self._urgent = threading.Event()  # commit without waiting for the window
        self._stop = threading.Event()
        self._segments: list[Segment] = []
        self._number = 0
        self._thread: threading.Thread | None = None
        self.database = connection.settings_dict["NAME"]  # the one it writes to, and no other

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._segments.append(self._open_segment())
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._thread.start()

    def _open_segment(self) -> Segment:
        self._number += 1
        return Segment(self.directory, self.process, self._number)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the request path --

    def submit(self, entry: Entry) -> None:
        """Journals ``entry`` (written to the OS before this returns) and queues it. No database.
        Raises WriterStopped once ``stop`` has begun."""
        line = entry.line()
        with self._lock:
            if self._stop.is_set() or not self._segments:
                raise WriterStopped
            segment = self._segments[-1]
            end: int | None = None
            try:
                end = os.fstat(segment.fd).st_size
                write_all(segment.fd, line)
                if conf.get().ledger.journal_fsync == "always":
                    os.fsync(segment.fd)
            except OSError as exc:
                # Cut a part-written line off, so the journal holds whole rows only, and let the caller
                # commit this one directly.
                if end is not None:
                    with contextlib.suppress(OSError):
                        os.ftruncate(segment.fd, end)
                raise JournalUnwritable(f"{segment.path}: {exc.strerror or exc}") from exc
            segment.size += len(line)
            segment.outstanding += 1
            entry.segment = segment
            self._queue.append(entry)
            self._submitted += 1
            full = len(self._queue) >= conf.get().ledger.batch_max
        if not self._wake.is_set():  # set by the window's first row: the next ones skip its lock
            self._wake.set()
        if full:
            self._urgent.set()

    def flush(self, timeout: float = 30.0) -> bool:
        """Waits until everything submitted so far is committed; False at the timeout (or when the
        thread has ended: what it left is in the journal)."""
        with self._lock:
            target = self._submitted
            if not self.alive:
                return self._done >= target
        self._urgent.set()
        self._wake.set()
        with self._done_changed:
            return self._done_changed.wait_for(lambda: self._done >= target, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Commits what is queued, returns the idle leases, deletes the journal (when all of it is
        committed) and ends the thread."""
        self.flush(timeout)
        self._stop.set()
        self._urgent.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._lock:
            if not self._queue:
                for segment in self._segments:
                    segment.close()
                self._segments = []

    # -- the thread --

    def _run(self) -> None:
        try:
            recover(directory=self.directory, skip=self.process)
        except Exception:
            log.exception("ledger journal recovery failed; beat retries it")
        failures = 0
        last_maintained = 0.0
        last_work = time.monotonic()
        while True:
            self._wake.wait(0.25)
            self._wake.clear()
            stopping = self._stop.is_set()
            if connection.settings_dict["NAME"] != self.database:
                # The settings now name another database (a test run's database was dropped): write
                # nothing there. What is queued stays in the journal, replayed where it belongs.
                log.warning("ledger writer: the settings name another database now; stopped")
                break
            try:
                with self._lock:
                    pending = bool(self._queue)
                if pending and not stopping:
                    self._urgent.wait(conf.get().ledger.flush_ms / 1000)  # the window
                self._urgent.clear()
                # Only after a window: a row queued since the check above waits for the next one.
                while (pending or stopping) and self._flush_batch():
                    last_work = time.monotonic()
                now = time.monotonic()
                if stopping or now - last_maintained >= 0.25:
                    last_maintained = now
                    lease_book = budget_leases.current_book()
                    if lease_book is not None:
                        lease_book.return_idle() if stopping else lease_book.maintain()
                failures = 0
            except Exception:
                failures += 1
                log.exception("ledger writer: commit failed (attempt %d); retrying", failures)
                with contextlib.suppress(Exception):
                    connection.close()
                if stopping and failures >= 3:
                    break  # the journal stays: the next start replays it
                time.sleep(min(0.05 * 2**failures, 5.0))
                continue
            if stopping and not self._queue:
                break
            if time.monotonic() - last_work > 1.0:
                connection.close()  # idle: give the connection back (a pool keeps it)
        connection.close()

    def pending_row(self, invocation_id: str) -> dict[str, Any] | None:
        """The ledger row of a call this process answered and has not committed yet, or None."""
        with self._lock:
            for entry in (*self._committing, *self._queue):
                if entry.row["id"] == invocation_id:
                    return entry.row
        return None

    def _flush_batch(self) -> bool:
        limit = conf.get().ledger.batch_max
        with self._lock:
            batch = self._queue[:limit]
            del self._queue[:limit]
            self._committing = batch
        if not batch:
            return False
        try:
            if conf.get().ledger.journal_fsync == "batch":
                for segment in {entry.segment for entry in batch if entry.segment is not None}:
                    os.fsync(segment.fd)  # open: its lines in this batch are outstanding
            commit(batch)
        except BaseException:
            with self._lock:
                self._queue[:0] = batch
                self._committing = []
            raise
        _flushed(batch)
        with self._lock:
            self._committing = []
            for entry in batch:
                if entry.segment is not None:
                    entry.segment.outstanding -= 1
            self._done += len(batch)
            self._done_changed.notify_all()
            current = self._segments[-1]
            if current.size >= conf.get().ledger.journal_rotate_bytes:
                self._segments.append(self._open_segment())
            for segment in self._segments[:-1]:
                if segment.outstanding == 0:
                    segment.close()
            self._segments = [s for s in self._segments[:-1] if s.outstanding] + self._segments[-1:]
        return True


def _flushed(entries: Iterable[Entry]) -> None:
    """Tells the lease book the spend of these entries is in the database."""
    spent = [(e.hold.lease, e.spend.cost) for e in entries if e.hold is not None and e.hold.lease is not None]
    lease_book = budget_leases.current_book()
    if spent and lease_book is not None:
        lease_book.flushed(spent)


# --- this process's writer ----------------------------------------------------------------------------

_writer: LedgerWriter | None = None
_writer_lock = threading.Lock()
_atexit_registered = False


def ensure_started() -> LedgerWriter:
    """This process's writer, started on first use (a new one after a fork). In "sync" mode it writes
    no rows, but holds the journal lock that says this process lives and keeps its leases."""
    global _writer, _atexit_registered
    current = _writer
    if current is not None and current.pid == os.getpid() and current.alive:
        return current
    with _writer_lock:
        if _writer is None or _writer.pid != os.getpid() or not _writer.alive:
            _writer = LedgerWriter(process=budgets.process_id(), directory=journal_dir())
            _writer.start()
            if not _atexit_registered:
                atexit.register(shutdown)
                _atexit_registered = True
        return _writer


def running() -> LedgerWriter | None:
    current = _writer
    return current if current is not None and current.pid == os.getpid() and current.alive else None


def record_call(*, record: CallRecord, hold: budgets.Hold | None) -> None:
    """Writes the call's ledger row and settles its budget hold, together: committed now
    (LEDGER_WRITER "sync") or journaled now and group-committed a few milliseconds later ("batched")."""
    write(Entry.of(ledger_row(record), hold, key_id=record.api_key_id))


def write(entry: Entry) -> None:
    """The ledger write of one finished call (``record_call``)."""
    hold = entry.hold
    lease_book = budget_leases.current_book() if hold is not None and hold.lease is not None else None
    if lease_book is not None and hold is not None:
        lease_book.settle(hold, entry.spend.cost)
    if writer_mode() == "batched":
        try:
            ensure_started().submit(entry)
            return
        except (WriterStopped, OSError) as exc:
            # The process is stopping, or the journal cannot be written (var/ full: the writer's start or
            # the append failed): commit it now, off the event loop (rare).
            if not isinstance(exc, WriterStopped) or isinstance(exc, JournalUnwritable):
                log.error("ledger journal unwritable, committing the row directly: %s", exc)
            thread = threading.Thread(target=_commit_now, args=(entry,), name="ledger-late-row")
            thread.start()
            thread.join()
            return
    _commit_now(entry)


def _commit_now(entry: Entry) -> None:
    try:
        commit([entry])
    finally:
        # On a failed commit the cost still counts as spent in this process's lease (it never holds it
        # again); the lease's return gives it back, as beat gives back a lost reservation.
        _flushed([entry])
        if threading.current_thread().name == "ledger-late-row":
            connection.close()


def pending_row(invocation_id: str) -> dict[str, Any] | None:
    """A row answered by this process, not yet in the database (read-your-writes: the Responses API's
    ``previous_response_id`` right after the response it names)."""
    current = running()
    return current.pending_row(invocation_id) if current is not None else None


def flush(timeout: float = 30.0) -> bool:
    """Waits until every row this process has answered is in the database (tests, read-your-writes)."""
    current = running()
    return current.flush(timeout) if current is not None else True


def drain(timeout: float = 30.0) -> bool:
    """``flush``, then returns every lease with no call in flight (as at a stop, without stopping)."""
    flushed = flush(timeout)
    lease_book = budget_leases.current_book()
    if lease_book is not None:
        lease_book.return_idle()
    return flushed


def shutdown(timeout: float = 30.0) -> None:
    """The clean stop (lifespan shutdown, atexit): nothing answered is lost, the leases go back."""
    global _writer
    current = _writer
    if current is None or current.pid != os.getpid():
        return
    # The thread returns the idle leases as it stops. A lease with a call still in flight stays: its
    # process is dead once this one exits, so recovery (beat, the next start) releases it safely.
    current.stop(timeout)
    _writer = None
