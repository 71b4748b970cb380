"""Writes of the Slack bot (house style: ``<entity>_<action>(*, ...)``, typed, atomic).

Deduplication and claims are single statements: a unique key for deliveries, conditional UPDATEs for
the task claim and the thread cursor, so retries and concurrent workers do the work once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from core import jobs
from diagnostics.models import ActionRequest, Incident, Trajectory
from diagnostics.slack.models import ActionMessage, SlackEvent, SlackUser, ThreadCursor


def slack_event_record(
    *, key: str, kind: str, payload: dict[str, Any], retry_num: int = 0
) -> SlackEvent | None:
    """Stores a delivery once. A second delivery of the same key (a Slack retry) returns None."""
    try:
        with transaction.atomic():
            return SlackEvent.objects.create(key=key[:200], kind=kind, payload=payload, retry_num=retry_num)
    except IntegrityError:
        SlackEvent.objects.filter(key=key[:200]).update(duplicates=F("duplicates") + 1)
        return None


SLACK_EVENT_JOB = jobs.JobSpec(
    SlackEvent,
    queued=SlackEvent.Status.RECEIVED,
    running=SlackEvent.Status.PROCESSING,
    heartbeat="claimed_at",
    born="received_at",
    error="error",
)


def slack_event_claim(*, event_id: int) -> SlackEvent | None:
    """RECEIVED -> PROCESSING with a conditional UPDATE (``core/jobs.py``; ``attempts`` counts the
    claims). None when another worker has it or it is done: running the task twice is harmless. An
    event whose worker died is requeued by the sweeper (``slack_events_sweep``), not here."""
    if jobs.claim(SLACK_EVENT_JOB, event_id) is None:
        return None
    return SlackEvent.objects.get(pk=event_id)


def slack_event_release(*, event: SlackEvent) -> None:
    """Gives a claimed event back (a transient failure: the database, Slack's API unreachable), so
    the task's retry, or the sweeper, handles it again."""
    jobs.still_ours(SLACK_EVENT_JOB, event.pk, event.attempts).update(
        status=SlackEvent.Status.RECEIVED, claimed_at=timezone.now()
    )


def slack_events_sweep(
    *, stale_after_s: float, ring_after_s: float, max_attempts: int, enqueue: Callable[[Any], None]
) -> jobs.SweepReport:
    """Deliveries whose task message was lost are sent again; those whose worker died are requeued,
    ``max_attempts`` claims at most, then failed with the reason."""

    def give_up(rows: QuerySet[SlackEvent], pk: Any, reason: str) -> bool:
        return bool(
            rows.update(status=SlackEvent.Status.FAILED, error=reason[:2000], processed_at=timezone.now())
        )

    return jobs.sweep(
        SLACK_EVENT_JOB,
        stale_after_s=stale_after_s,
        ring_after_s=ring_after_s,
        max_attempts=max_attempts,
        enqueue=enqueue,
        give_up=give_up,
    )


def slack_event_finish(*, event: SlackEvent, incident: Incident | None = None, error: str = "") -> SlackEvent:
    event.status = SlackEvent.Status.FAILED if error else SlackEvent.Status.DONE
    event.error = error[:2000]
    event.incident = incident or event.incident
    event.processed_at = timezone.now()
    event.save(update_fields=["status", "error", "incident", "processed_at"])
    return event


def slack_events_purge(*, older_than: timedelta = timedelta(days=1)) -> int:
    """Slack retries for about an hour; deliveries older than a day no longer need remembering."""
    deleted, _ = SlackEvent.objects.filter(received_at__lt=timezone.now() - older_than).delete()
    return deleted


@transaction.atomic
def slack_user_link(*, slack_user_id: str, user: User, team_id: str = "") -> SlackUser:
    """Links (or re-links) a Slack member to a Django user."""
    link, _ = SlackUser.objects.update_or_create(
        slack_user_id=slack_user_id, defaults={"user": user, "team_id": team_id}
    )
    return link


def thread_cursor_get(*, trajectory: Trajectory) -> ThreadCursor:
    try:
        with transaction.atomic():
            return ThreadCursor.objects.get_or_create(trajectory=trajectory)[0]
    except IntegrityError:  # created concurrently by another worker
        return ThreadCursor.objects.get(trajectory=trajectory)


def thread_cursor_advance(*, cursor_id: int, from_index: int, to_index: int) -> bool:
    """Claims steps ``from_index+1 .. to_index`` for posting; False when another worker claimed them."""
    return bool(
        ThreadCursor.objects.filter(pk=cursor_id, posted_index=from_index).update(posted_index=to_index)
    )


def thread_cursor_rewind(*, cursor_id: int, from_index: int, to_index: int) -> None:
    """Gives back a claim whose post failed, so a retry posts those steps."""
    ThreadCursor.objects.filter(pk=cursor_id, posted_index=to_index).update(posted_index=from_index)


def action_message_claim(*, action: ActionRequest, channel: str) -> ActionMessage | None:
    """Claims the right to post an action's buttons (once per action); None when already claimed."""
    try:
        with transaction.atomic():
            return ActionMessage.objects.create(action=action, channel=channel)
    except IntegrityError:
        return None


def action_message_posted(*, message: ActionMessage, ts: str) -> ActionMessage:
    message.ts = ts
    message.save(update_fields=["ts"])
    return message


def action_message_release(*, message: ActionMessage) -> None:
    """The post failed: drop the claim so a retry posts the buttons."""
    ActionMessage.objects.filter(pk=message.pk, ts="").delete()
