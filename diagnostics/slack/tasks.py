"""Celery tasks of the Slack bot: thin, take ids, claim with a conditional UPDATE, idempotent, acks_late.

The endpoint enqueues ``handle_event`` (one stored delivery); a committed Step of a Slack incident
enqueues ``sync_thread`` (post what the thread has not shown yet). They run on DIAGNOSTICS_QUEUE, like
the diagnosis tasks (default: Celery's default queue).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from celery import Task, shared_task
from django.db import OperationalError, transaction
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.webhook import WebhookClient

from core import jobs, jobs_conf
from core.errors import ServiceError
from core.queues import enqueue
from diagnostics import conf as diagnostics_conf
from diagnostics import selectors as diagnostics_selectors
from diagnostics import services as diagnostics_services
from diagnostics.agent.request.structured import slack_message_labels
from diagnostics.models import ActionRequest, Incident, Step, Trajectory
from diagnostics.slack import conf, messages, selectors, services
from diagnostics.slack.models import SlackEvent

log = logging.getLogger(__name__)
MENTION = re.compile(r"<@[A-Z0-9]+(\|[^>]*)?>")
BATCH = 50
APPROVED_STATES = {
    ActionRequest.Status.APPROVED,
    ActionRequest.Status.EXECUTING,
    ActionRequest.Status.EXECUTED,
    ActionRequest.Status.FAILED,
}


def enqueue_event(event_id: int) -> None:
    enqueue(handle_event, event_id, queue=diagnostics_conf.get().agent.queue)


def enqueue_sync(trajectory_id: int) -> None:
    enqueue(sync_thread, trajectory_id, queue=diagnostics_conf.get().agent.queue)


# --- deliveries ----------------------------------------------------------------------------------


@shared_task(bind=True, acks_late=True, ignore_result=True)
def handle_event(self: Task, event_id: int) -> str:
    """Handles one stored delivery. Transient failures (the database, Slack's Web API unreachable)
    give the event back and retry with a growing delay; the event's row counts the claims, and after
    SKILLGATE_JOBS_MAX_ATTEMPTS of them it is failed with the reason. A retry message that is lost
    (a worker killed while it waited) is sent again by the sweeper (``sweep_events``)."""
    event = services.slack_event_claim(event_id=event_id)
    if event is None:
        return "not claimed"
    handler = {
        SlackEvent.Kind.COMMAND: _open_from_command,
        SlackEvent.Kind.MENTION: _open_from_mention,
        SlackEvent.Kind.ACTION: _decide,
    }[SlackEvent.Kind(event.kind)]
    spec = services.SLACK_EVENT_JOB
    try:
        with jobs.heartbeat(spec, event.pk, event.attempts, every_s=jobs_conf.get().heartbeat_s):
            return handler(event, conf.web_client())
    except (OperationalError, OSError) as exc:  # OSError: Slack's Web API unreachable (URLError, timeout)
        log.warning("Slack delivery %s: %s (attempt %s)", event.key, exc, event.attempts)
        if event.attempts >= jobs_conf.get().max_attempts:
            if isinstance(exc, OperationalError):
                raise  # the row stays claimed; once the database is back the sweeper fails it
            services.slack_event_finish(
                event=event, error=f"Slack's Web API unreachable after {event.attempts} tries: {exc}"
            )
            return "failed"
        services.slack_event_release(event=event)  # a database still down raises: the sweeper has it
        raise self.retry(exc=exc, countdown=min(2**event.attempts, 60), max_retries=None) from exc
    except SlackClientError as exc:
        log.warning("Slack delivery %s failed: %s", event.key, exc)
        services.slack_event_finish(event=event, error=f"{type(exc).__name__}: {exc}")
        return "failed"
    except Exception as exc:
        log.exception("Slack delivery %s failed", event.key)
        services.slack_event_finish(event=event, error=f"{type(exc).__name__}: {exc}")
        return "failed"


@shared_task(acks_late=True, ignore_result=True)
def sweep_events() -> int:
    """Beat: deliveries whose task was lost, or whose worker died (core/jobs.py)."""
    return len(
        services.slack_events_sweep(
            **jobs_conf.get().sweep_timings(),
            enqueue=enqueue_event,
        )
    )


def _open_from_command(event: SlackEvent, client: WebClient) -> str:
    """``/sre diagnose <text>``: a root message in the channel, the incident threaded under it."""
    body = event.payload
    text, user_id, channel = body["diagnose_text"], body["user_id"], body["channel_id"]
    if refusal := _may_not_open(user_id):
        _respond(body.get("response_url", ""), refusal)
        services.slack_event_finish(event=event, error=refusal)
        return "refused"
    try:
        root = client.chat_postMessage(
            channel=channel,
            text=f":rotating_light: *Incident:* {messages.quoted(text, 2000)}\nOpened by <@{user_id}> "
            f"with `{body.get('command', conf.command_name())} diagnose`.",
        )
    except SlackApiError as exc:
        _respond(
            body.get("response_url", ""), f"I could not post in this channel ({exc.response.get('error')})."
        )
        services.slack_event_finish(event=event, error=str(exc))
        return "failed"
    with transaction.atomic():  # the incident and the event's end together: a rerun never opens two
        incident = _open(text=text, user_id=user_id, channel=str(root["channel"]), thread_ts=str(root["ts"]))
        services.slack_event_finish(event=event, incident=incident)
    return "opened"


def _open_from_mention(event: SlackEvent, client: WebClient) -> str:
    """A mention opens an incident threaded under the mention (or in the thread it was made in)."""
    mention = event.payload["event"]
    # Slack delivers text with & < > as entities: the incident keeps what the member typed.
    text = messages.unescape(" ".join(MENTION.sub(" ", mention.get("text", "")).split()))
    channel, thread_ts = mention["channel"], mention.get("thread_ts") or mention["ts"]
    if refusal := _may_not_open(mention.get("user", "")):
        client.chat_postEphemeral(
            channel=channel, user=mention.get("user", ""), thread_ts=thread_ts, text=refusal
        )
        services.slack_event_finish(event=event, error=refusal)
        return "refused"
    if not text:
        client.chat_postMessage(
            channel=channel,
            thread_ts=thread_ts,
            text="Tell me what is wrong, e.g. `@bot the api returns 502`.",
        )
        services.slack_event_finish(event=event, error="empty mention")
        return "empty"
    alert = _thread_alert(client, channel, thread_ts) if thread_ts != mention["ts"] else ""
    with transaction.atomic():  # the incident and the event's end together: a rerun never opens two
        incident = _open(
            text=text,
            user_id=mention.get("user", ""),
            channel=channel,
            thread_ts=thread_ts,
            description=f"{text}\n{alert}" if alert else text,
        )
        services.slack_event_finish(event=event, incident=incident)
    return "opened"


def _thread_alert(client: WebClient, channel: str, thread_ts: str) -> str:
    """A mention in a thread an alert started (Alertmanager's Slack notification): the labels of that
    message's attachments and blocks, as a JSON document the diagnosis reads before the member's words.
    "" when the message carries none or cannot be read (the history scope missing, say)."""
    try:
        reply = client.conversations_replies(channel=channel, ts=thread_ts, limit=1, inclusive=True)
    except SlackClientError as exc:
        log.info("slack: the thread's first message could not be read: %s", exc)
        return ""
    found = reply.get("messages") if isinstance(reply.get("messages"), list) else []
    labels = slack_message_labels(found[0]) if found else {}
    return json.dumps({"labels": labels}, sort_keys=True) if labels else ""


def _may_not_open(user_id: str) -> str:
    """Why this Slack member may not open an incident ("" when they may). Anyone in a channel with the
    bot may (diagnosis only reads) unless SLACK_OPEN_NEEDS_ROLE asks for a linked operator."""
    if not conf.open_needs_role():
        return ""
    user = selectors.user_for_slack(slack_user_id=user_id) if user_id else None
    if user is None:
        return (
            ":no_entry: Only members linked to a Skillgate user may open incidents here: ask an admin to "
            "run `manage.py slack_link_user`."
        )
    if not user.has_perm(diagnostics_services.OPEN_PERMISSION):
        return (
            f":no_entry: Your Skillgate user {messages.escape(user.get_username())} may not open incidents "
            "(operator role)."
        )
    return ""


def _open(*, text: str, user_id: str, channel: str, thread_ts: str, description: str = "") -> Incident:
    """The Slack member is the trigger even when unlinked (then the incident has no requester, and
    whoever links that member later still may not approve its actions); a linked member's user is
    the requester."""
    return diagnostics_services.incident_open(
        title=text,
        description=description or text,
        source=Incident.Source.SLACK,
        created_by=selectors.user_for_slack(slack_user_id=user_id) if user_id else None,
        slack_channel=channel,
        slack_thread_ts=thread_ts,
        trigger=Incident.Trigger.SLACK,
        trigger_ref=user_id,
    )


def _respond(response_url: str, text: str) -> None:
    if response_url:
        WebhookClient(response_url, timeout=10).send(text=text, response_type="ephemeral")


def _decide(event: SlackEvent, client: WebClient) -> str:
    """An Approve / Deny click, decided by the diagnostics services as the linked Django user: the
    same rules as the API and the dashboard (the approve permission, the two-person rule of
    ``diagnostics/approvals.py``, the plan hash the button carries)."""
    body = event.payload
    clicked = body["actions"][0]
    slack_user = body["user"]["id"]
    channel = body.get("channel", {}).get("id") or body["container"]["channel_id"]
    message_ts = body["container"]["message_ts"]
    thread_ts = body.get("message", {}).get("thread_ts") or body["container"].get("thread_ts") or message_ts
    value = json.loads(clicked["value"])
    action_id, plan = int(value["action"]), str(value["plan"])

    def refuse(message: str, code: str) -> str:
        client.chat_postEphemeral(
            channel=channel, user=slack_user, thread_ts=thread_ts, text=f":warning: {message}"
        )
        services.slack_event_finish(event=event, error=code)
        return code

    user = selectors.user_for_slack(slack_user_id=slack_user)
    if user is None:
        return refuse(
            f"Your Slack account (<@{slack_user}>) is not linked to a Skillgate user, so you cannot decide "
            "on actions. Ask an admin to link it (Admin > Slack users).",
            "unlinked_user",
        )
    approve = clicked["action_id"] == messages.APPROVE
    try:
        if approve:
            decided = diagnostics_services.action_request_approve(
                action_request_id=action_id, user=user, plan_hash_seen=plan, note="via Slack"
            )
        else:
            decided = diagnostics_services.action_request_deny(
                action_request_id=action_id, user=user, note="via Slack"
            )
    except ServiceError as exc:
        current = diagnostics_selectors.action_request_get(action_request_id=action_id)
        same = APPROVED_STATES if approve else {ActionRequest.Status.DENIED}
        repeat = (
            current is not None
            and exc.code == "action_not_pending"
            and current.decided_by_id == user.pk
            and current.status in same
        )
        if current is not None:
            _update_action(client, channel, message_ts, current)  # show the real state; drop stale buttons
        if repeat:  # a double click: the first one decided, nothing more to do
            services.slack_event_finish(event=event)
            return "already decided"
        return refuse(messages.escape(exc.message), exc.code)  # may quote an action's tool or args
    _update_action(client, channel, message_ts, decided)
    services.slack_event_finish(event=event, incident=decided.trajectory.incident)
    return decided.status


def _update_action(client: WebClient, channel: str, ts: str, action: ActionRequest) -> None:
    text, blocks = messages.action(action)
    client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks)


# --- the thread ----------------------------------------------------------------------------------


@shared_task(
    acks_late=True,
    ignore_result=True,
    autoretry_for=(OperationalError, SlackClientError),
    retry_backoff=True,
    max_retries=5,
)
def sync_thread(trajectory_id: int) -> int:
    """Posts the trajectory's steps the thread has not shown yet, in order; returns how many.

    Progress lines are batched into one message; proposals (with buttons), the diagnosis and a failure
    get messages of their own. Each batch is claimed on the cursor before it is posted, so concurrent
    runs never post a step twice; a failed post gives its claim back and the task retries.
    """
    trajectory = Trajectory.objects.select_related("incident").filter(pk=trajectory_id).first()
    if trajectory is None or not conf.enabled():
        return 0
    incident = trajectory.incident
    if not incident.slack_channel or not incident.slack_thread_ts:
        return 0
    cursor = services.thread_cursor_get(trajectory=trajectory)
    client = conf.web_client()
    posted = 0
    while True:
        cursor.refresh_from_db()
        steps = list(
            diagnostics_selectors.trajectory_steps_after(
                trajectory_id=trajectory_id, after_index=cursor.posted_index
            )[:BATCH]
        )
        if not steps:
            return posted
        batch = _batch(steps)
        start, end = cursor.posted_index, batch[-1].index
        if not services.thread_cursor_advance(cursor_id=cursor.pk, from_index=start, to_index=end):
            return posted  # another run claimed these steps
        try:
            _post(client, incident, trajectory, batch)
        except Exception:
            services.thread_cursor_rewind(cursor_id=cursor.pk, from_index=start, to_index=end)
            raise
        posted += len(batch)


def _batch(steps: list[Step]) -> list[Step]:
    """The leading run of progress steps, or the first step alone when it needs a message of its own."""
    if not _is_progress(steps[0]):
        return steps[:1]
    run = []
    for step in steps:
        if not _is_progress(step):
            break
        run.append(step)
    return run


def _is_progress(step: Step) -> bool:
    return step.phase in messages.PROGRESS_PHASES or (step.phase == Step.Phase.PROPOSE and not step.ok)


def _post(client: WebClient, incident: Incident, trajectory: Trajectory, batch: list[Step]) -> None:
    where: dict[str, Any] = {"channel": incident.slack_channel, "thread_ts": incident.slack_thread_ts}
    step = batch[0]
    if _is_progress(step):
        text, blocks = messages.progress(batch, opened=(incident, trajectory) if step.index == 1 else None)
        client.chat_postMessage(**where, text=text, blocks=blocks)
        for executed in (s for s in batch if s.phase == Step.Phase.EXECUTE):
            _refresh_action_message(client, trajectory, executed)
    elif step.phase == Step.Phase.PROPOSE:
        for action in selectors.actions_to_post(trajectory_id=trajectory.pk):
            message = services.action_message_claim(action=action, channel=incident.slack_channel)
            if message is None:
                continue
            text, blocks = messages.action(action)
            try:
                response = client.chat_postMessage(**where, text=text, blocks=blocks)
            except Exception:
                services.action_message_release(message=message)
                raise
            services.action_message_posted(message=message, ts=str(response["ts"]))
    elif step.phase == Step.Phase.SUBMIT:
        text, blocks = messages.diagnosis(step, trajectory_id=trajectory.pk)
        client.chat_postMessage(**where, text=text, blocks=blocks)
    else:
        client.chat_postMessage(**where, text=messages.failure(step))


def _refresh_action_message(client: WebClient, trajectory: Trajectory, step: Step) -> None:
    """After an action ran, its message shows the outcome instead of 'running'."""
    action = (
        ActionRequest.objects.filter(
            trajectory=trajectory,
            tool=step.tool,
            status__in=[ActionRequest.Status.EXECUTED, ActionRequest.Status.FAILED],
        )
        .order_by("-executed_at")
        .first()
    )
    message = selectors.action_message_for(action_request_id=action.pk) if action else None
    if message is not None:
        _update_action(client, message.channel, message.ts, message.action)


@shared_task(acks_late=True, ignore_result=True)
def purge_events() -> int:
    return services.slack_events_purge()
