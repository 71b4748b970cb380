"""Background jobs whose database row is the record, and the broker only the doorbell.

A job row carries a state, the number of times a worker claimed it (``attempts``) and a heartbeat
(``heartbeat_at``: while queued, when its message was last sent; while running, when its worker last
showed life). A task takes the row's id and

- claims it with one conditional UPDATE (queued -> running, ``attempts + 1``, heartbeat now): of two
  deliveries of the same message only one gets it, and the attempt number it gets names its run;
- keeps the heartbeat fresh from a side thread while it works (``heartbeat``), as long as the row is
  still its own (same state, same attempt);
- finishes with a conditional UPDATE on the same attempt (``still_ours``), so a run the sweeper gave
  up on cannot overwrite the sweeper's decision.

The sweeper (``sweep``, on Celery beat) does not trust the broker to hold a message:

- a queued row whose message was sent long ago (``ring_after_s``) gets it sent again (a message
  fetched by a worker that then died, e.g. on the file transport, which deletes a message when it
  is fetched, so ``acks_late`` keeps nothing; or a send that failed while the broker was down);
- a running row without a heartbeat for ``stale_after_s`` lost its worker: it is requeued (or handed
  to the app's ``retry``) while it has attempts left, and given up (``give_up``, with the reason)
  after ``max_attempts`` claims. A task that kills its worker every time it runs (a poison message,
  redelivered by Redis's ``reject_on_worker_lost``) is so bounded too: the redelivery finds the row
  still running and does nothing, and the sweeper counts the attempts.

Plain mechanics over any model (the apps pass a ``JobSpec``); ``core`` imports no app. Its users:
diagnoses and action executions (diagnostics/services/recovery.py), Slack deliveries, teacher
samples (routing/call/sampling.py), the Evolver's skills and skill-set admissions
(training/services/evolver/jobs.py) and adapter training runs (training/services/adapters.py).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import models, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobSpec:
    """Which fields of ``model`` hold a job's state, attempts and heartbeat, and the state names."""

    model: type[models.Model]
    queued: str
    running: str
    state: str = "status"
    attempts: str = "attempts"
    heartbeat: str = "heartbeat_at"
    born: str = "created_at"  # a queued row with no heartbeat yet counts from here
    error: str = ""  # a text field for the reason of a requeue, if the model has one
    scope: Q = field(default_factory=Q)  # only rows matching this are jobs (e.g. sampled calls)
    reset: dict[str, Any] = field(default_factory=dict)  # written back by a requeue (e.g. progress)

    def rows(self) -> QuerySet[Any]:
        return self.model._default_manager.filter(self.scope)


@dataclass
class SweepReport:
    """What one sweep did, by row id: doorbells rung again, rows requeued or retried, rows given up."""

    rung: list[Any] = field(default_factory=list)
    requeued: list[Any] = field(default_factory=list)
    given_up: list[Any] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rung) + len(self.requeued) + len(self.given_up)


def claim(spec: JobSpec, pk: Any, **fields: Any) -> int | None:
    """queued -> running, once: the attempt number this delivery owns, or None (another delivery
    has it, or it is finished). ``fields`` are written in the same UPDATE (e.g. ``started_at``)."""
    now = timezone.now()
    claimed = (
        spec.rows()
        .filter(pk=pk, **{spec.state: spec.queued})
        .update(
            **{spec.state: spec.running, spec.attempts: F(spec.attempts) + 1, spec.heartbeat: now}, **fields
        )
    )
    if not claimed:
        return None
    return int(spec.rows().filter(pk=pk).values_list(spec.attempts, flat=True).get())


def still_ours(spec: JobSpec, pk: Any, attempt: int) -> QuerySet[Any]:
    """The row, as long as this attempt still owns it (running, not requeued or given up)."""
    return spec.rows().filter(pk=pk, **{spec.state: spec.running, spec.attempts: attempt})


def beat(spec: JobSpec, pk: Any, attempt: int) -> bool:
    """One heartbeat; False when the row is no longer this attempt's."""
    return bool(still_ours(spec, pk, attempt).update(**{spec.heartbeat: timezone.now()}))


@contextlib.contextmanager
def heartbeat(spec: JobSpec, pk: Any, attempt: int, *, every_s: float) -> Iterator[None]:
    """Writes the heartbeat every ``every_s`` seconds from a side thread while the block runs (the
    block may be one long call: an upstream request, an action that waits for a rollout)."""
    from django.db import connection

    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.wait(every_s):
                try:
                    if not beat(spec, pk, attempt):
                        return  # the sweeper took it over: its decision stands
                except Exception:  # a database hiccup: the next beat tries again
                    log.warning("heartbeat of %s %s failed", spec.model.__name__, pk, exc_info=True)
        finally:
            connection.close()

    thread = threading.Thread(target=run, name=f"heartbeat-{spec.model.__name__}-{pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every_s + 5)


def ring(spec: JobSpec, pk: Any) -> bool:
    """Marks a queued row's message as sent now (the sweeper then waits ``ring_after_s`` again)."""
    return bool(
        spec.rows().filter(pk=pk, **{spec.state: spec.queued}).update(**{spec.heartbeat: timezone.now()})
    )


def sweep(
    spec: JobSpec,
    *,
    stale_after_s: float,
    ring_after_s: float,
    max_attempts: int,
    enqueue: Callable[[Any], None],
    give_up: Callable[[QuerySet[Any], Any, str], bool],
    retry: Callable[..., None] | None = None,
) -> SweepReport:
    """Sends again the messages of queued rows sent more than ``ring_after_s`` ago; requeues running
    rows without a heartbeat for ``stale_after_s`` while they have attempts left, else gives them up.

    ``enqueue(pk)`` sends a row's message (after the sweep's UPDATE commits). ``give_up(rows, pk,
    reason)`` ends a row that used its ``max_attempts``: ``rows`` is the row, conditional on it still
    being the stale attempt the sweep saw; it returns whether it ended it. ``retry``, when given
    (called as ``retry(pk, attempt=n)``), replaces the requeue: the sweep only takes the row over
    (``attempts + 1``, heartbeat now, still running) and ``retry`` sends whatever recovers it (an
    action is never re-run blindly).
    Every step is conditional, so concurrent sweeps and live workers are safe.
    """
    now = timezone.now()
    report = SweepReport()
    ring_cutoff = now - timedelta(seconds=ring_after_s)
    stale_cutoff = now - timedelta(seconds=stale_after_s)
    queued_late = Q(**{f"{spec.heartbeat}__lt": ring_cutoff}) | Q(
        **{f"{spec.heartbeat}__isnull": True, f"{spec.born}__lt": ring_cutoff}
    )
    for pk in list(spec.rows().filter(queued_late, **{spec.state: spec.queued}).values_list("pk", flat=True)):
        if (
            spec.rows()
            .filter(queued_late, pk=pk, **{spec.state: spec.queued})
            .update(**{spec.heartbeat: now})
        ):
            transaction.on_commit(functools.partial(_send, enqueue, pk))
            report.rung.append(pk)
    stale = Q(**{f"{spec.heartbeat}__lt": stale_cutoff}) | Q(**{f"{spec.heartbeat}__isnull": True})
    lost = spec.rows().filter(stale, **{spec.state: spec.running}).values_list("pk", spec.attempts)
    for pk, attempts in list(lost):
        reason = f"worker lost (no heartbeat for {stale_after_s:g} s) on attempt {attempts} of {max_attempts}"
        with transaction.atomic():
            mine = spec.rows().filter(stale, pk=pk, **{spec.state: spec.running, spec.attempts: attempts})
            if attempts >= max_attempts:
                if give_up(mine, pk, reason):
                    report.given_up.append(pk)
                    log.warning("%s %s given up: %s", spec.model.__name__, pk, reason)
                continue
            if retry is not None:
                if mine.update(**{spec.attempts: attempts + 1, spec.heartbeat: now}):
                    transaction.on_commit(
                        functools.partial(_send, functools.partial(retry, attempt=attempts + 1), pk)
                    )
                    report.requeued.append(pk)
                continue
            update: dict[str, Any] = {**spec.reset, spec.state: spec.queued, spec.heartbeat: now}
            if spec.error:
                update[spec.error] = reason
            if mine.update(**update):
                transaction.on_commit(functools.partial(_send, enqueue, pk))
                report.requeued.append(pk)
                log.warning("%s %s requeued: %s", spec.model.__name__, pk, reason)
    return report


def _send(enqueue: Callable[[Any], None], pk: Any) -> None:
    """Sends a message; a broker that is down is not the row's end: the next sweep sends it again."""
    try:
        enqueue(pk)
    except Exception:
        log.warning("could not send the message of job %s; the next sweep sends it again", pk, exc_info=True)
