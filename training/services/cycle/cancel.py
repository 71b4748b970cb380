"""Cancelling a learning cycle, and the watch that stops its training where it runs.

``cycle_cancel`` ends an unfinished cycle ``cancelled`` and cancels its training run (queued: no worker
will claim it; running: its worker stops it). Nothing the cycle made is admitted afterwards: the
admission stage claims its right to apply with a conditional UPDATE (``admission_claim``) that a
cancelled cycle fails, and a cycle whose admission made that claim can no longer be cancelled (it is
being applied).

The worker may run on another machine, so the stop travels through the database, not the broker (the
filesystem broker has no broadcast for Celery's ``revoke``): while a run trains, ``stopped_when_cancelled``
reads its status from a side thread and, once it reads ``cancelled``, sends its own process SIGTERM.
The handler it installed for the run raises :class:`TrainingCancelled` in the main thread, so the
training unwinds like any failure (a DDP launch's ``finally`` stops its ranks' process group); a SIGTERM
that is not the watch's goes to the handler that was there before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from training.models import Adapter, Cycle, TrainingRun

log = logging.getLogger(__name__)

__all__ = [
    "TrainingCancelled",
    "admission_claim",
    "cycle_cancel",
    "stopped_when_cancelled",
    "training_run_cancel",
]


class TrainingCancelled(BaseException):
    """The run being trained in this process was cancelled (raised by the SIGTERM handler)."""


def training_run_cancel(*, run_id: int, reason: str) -> bool:
    """A queued or running run becomes ``cancelled`` and its candidate adapter ``failed`` (it has no
    usable folder); a finished run's candidate is retired unadmitted. False when the run had ended."""
    now = timezone.now()
    with transaction.atomic():
        stopped = TrainingRun.objects.filter(
            pk=run_id, status__in=(TrainingRun.Status.QUEUED, TrainingRun.Status.RUNNING)
        ).update(status=TrainingRun.Status.CANCELLED, error=reason[:4000], finished_at=now)
        candidate = Adapter.objects.filter(runs__pk=run_id, status=Adapter.Status.CANDIDATE)
        if stopped:
            candidate.update(status=Adapter.Status.FAILED)
        else:
            candidate.update(status=Adapter.Status.RETIRED, retired_at=now)
    return bool(stopped)


def cycle_cancel(*, cycle_id: int, user: str) -> bool:
    """Stops an unfinished cycle: ``cancelled`` ("cancelled by <user>"), its training run cancelled and
    stopped by its worker. A stage running now finishes its own call but the cycle does not move on
    (``_advance`` moves only unfinished cycles) and its admission is not applied. False when the cycle
    had ended, or its admission is being applied."""
    with transaction.atomic():
        cancelled = (
            Cycle.objects.filter(pk=cycle_id, status__in=Cycle.UNFINISHED)
            .exclude(stage=Cycle.Stage.ADMISSION, admission__isnull=False)
            .update(
                status=Cycle.Status.CANCELLED, error=f"cancelled by {user}"[:4000], finished_at=timezone.now()
            )
        )
        if not cancelled:
            return False
        run_id = Cycle.objects.filter(pk=cycle_id).values_list("training_run_id", flat=True).get()
        if run_id is not None:
            training_run_cancel(run_id=run_id, reason=f"its cycle {cycle_id} was cancelled by {user}")
    return True


def admission_claim(*, cycle_id: int, admission_id: int) -> bool:
    """The admission stage's right to apply its decision: True when the cycle was still running its
    admission (and now names it: from here on it cannot be cancelled); False when it was cancelled."""
    return bool(
        Cycle.objects.filter(pk=cycle_id, status=Cycle.Status.RUNNING, stage=Cycle.Stage.ADMISSION).update(
            admission_id=admission_id
        )
    )


def _status(run_id: int) -> str | None:
    return TrainingRun.objects.filter(pk=run_id).values_list("status", flat=True).first()


@contextlib.contextmanager
def stopped_when_cancelled(run_id: int, *, every_s: float) -> Iterator[None]:
    """While the block trains ``run_id`` in this process's main thread, a side thread reads the run's
    status every ``every_s`` seconds; once ``cancelled``, it sends this process SIGTERM and the block
    ends in :class:`TrainingCancelled`. Outside the main thread (no signal handler can be set there)
    the block runs unwatched: the run's row stays cancelled and nothing it trains is admitted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    done, cancelled, inside = threading.Event(), threading.Event(), threading.Event()
    inside.set()

    def watch() -> None:
        try:
            while not done.wait(every_s):
                try:
                    status = _status(run_id)
                except DatabaseError:  # a hiccup: the next read tries again
                    continue
                if status == TrainingRun.Status.CANCELLED:
                    log.warning(
                        "training run %s was cancelled: stopping it (SIGTERM to %s)", run_id, os.getpid()
                    )
                    cancelled.set()
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
        finally:
            connection.close()

    def on_term(signum: int, frame: FrameType | None) -> None:
        if cancelled.is_set():
            if inside.is_set():
                raise TrainingCancelled(f"training run {run_id} was cancelled")
            return  # the block ended as the watch sent it: nothing left to stop
        _pass_on(previous, signum, frame)

    previous = signal.signal(signal.SIGTERM, on_term)
    watcher = threading.Thread(target=watch, name=f"cancel-watch-{run_id}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        inside.clear()
        done.set()
        watcher.join()
        signal.signal(signal.SIGTERM, previous)


def _pass_on(previous: Any, signum: int, frame: FrameType | None) -> None:
    """A SIGTERM that is not the watch's: what the process would have done without it."""
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:  # the default: the process ends
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
