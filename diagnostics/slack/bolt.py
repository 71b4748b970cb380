"""The slack_bolt App: verifies signatures (5-minute replay window), deduplicates, records, acks.

``process_before_response=True``: each listener runs to completion in the request's own thread before
the HTTP response is sent. Bolt's default (False) acks first and keeps running the listener on a
thread pool inside the web process, where the work dies with a restart and is never retried. Here
the listeners only store the delivery (one INSERT under a unique key) and enqueue a Celery task, so
the ack still leaves within milliseconds and all slow work (Slack API calls, the diagnosis, the
decision) runs on workers that retry. No Web API call is made on the request path at all (not even
Bolt's ``auth.test``): the ack does not depend on Slack's API being reachable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from slack_bolt import Ack, App, BoltRequest
from slack_bolt.adapter.django import SlackRequestHandler
from slack_bolt.authorization import AuthorizeResult

from core.queues import on_commit
from diagnostics.slack import conf, messages, services, tasks
from diagnostics.slack.models import SlackEvent

log = logging.getLogger(__name__)


def usage() -> str:
    name = conf.command_name()
    return (
        f"Usage: `{name} diagnose <what is wrong>`, e.g. `{name} diagnose checkout returns 502`. "
        "I open an incident, diagnose it and post the steps in a thread; you can also mention me."
    )


def _retry_num(request: BoltRequest) -> int:
    value = (request.headers.get("x-slack-retry-num") or ["0"])[0]
    return int(value) if value.isdigit() else 0


def _store(*, key: str, kind: str, payload: dict[str, Any], request: BoltRequest) -> bool:
    """Records the delivery and enqueues its task after commit; False for a duplicate (a retry)."""
    event = services.slack_event_record(key=key, kind=kind, payload=payload, retry_num=_retry_num(request))
    if event is None:
        log.info("dropped a repeated Slack delivery %s (retry %s)", key, _retry_num(request))
        return False
    event_id = event.pk
    on_commit(tasks.enqueue_event, event_id)
    return True


def on_command(ack: Ack, body: dict[str, Any], request: BoltRequest) -> None:
    verb, _, text = str(body.get("text", "")).strip().partition(" ")
    text = messages.unescape(text.strip())  # Slack sends & < > as entities; the incident keeps the text
    if verb.lower() != "diagnose" or not text:
        ack(text=usage())
        return
    stored = _store(
        key=f"command:{body.get('trigger_id', '')}",
        kind=SlackEvent.Kind.COMMAND,
        payload={**body, "diagnose_text": text},
        request=request,
    )
    ack(text=f"Opening an incident: {messages.quoted(text, 300)}" if stored else "Already on it.")


def on_mention(ack: Ack, body: dict[str, Any], request: BoltRequest) -> None:
    ack()
    _store(
        key=f"event:{body.get('event_id', '')}", kind=SlackEvent.Kind.MENTION, payload=body, request=request
    )


def on_decision(ack: Ack, body: dict[str, Any], request: BoltRequest) -> None:
    ack()
    _store(
        key=f"action:{body.get('trigger_id', '')}:{body['actions'][0].get('action_ts', '')}",
        kind=SlackEvent.Kind.ACTION,
        payload=body,
        request=request,
    )


def _authorize_with(token: str) -> Callable[..., AuthorizeResult]:
    """The bot's one workspace, authorized from its token alone. Bolt's single-team default calls
    Slack's ``auth.test`` on the first request, on the request path: with Slack's Web API unreachable
    a correctly signed slash command then got a 500 instead of its ack. The signature (checked before
    this runs) is what proves a request came from Slack; every Web API call is made by the workers."""

    # Bolt passes the arguments a function names (positional parameters, not keyword-only ones).
    def authorize(enterprise_id: str | None, team_id: str | None, user_id: str | None) -> AuthorizeResult:
        return AuthorizeResult(enterprise_id=enterprise_id, team_id=team_id, user_id=user_id, bot_token=token)

    return authorize


def build_app(*, token: str, signing_secret: str, api_url: str) -> App:
    client = conf.web_client_for(token=token, api_url=api_url)
    client.token = None  # each request's client gets the token from ``authorize``
    app = App(
        client=client,
        signing_secret=signing_secret,
        process_before_response=True,
        # No auth.test, neither at construction nor on a request (see ``_authorize_with``).
        authorize=_authorize_with(token),
    )
    app.command(conf.command_name())(on_command)
    app.event("app_mention")(on_mention)
    app.action(messages.APPROVE)(on_decision)
    app.action(messages.DENY)(on_decision)
    return app


@lru_cache(maxsize=1)
def _handler(token: str, signing_secret: str, api_url: str) -> SlackRequestHandler:
    return SlackRequestHandler(app=build_app(token=token, signing_secret=signing_secret, api_url=api_url))


def handler() -> SlackRequestHandler:
    """The request handler for the current settings (rebuilt when they change, e.g. in tests)."""
    return _handler(conf.bot_token(), conf.signing_secret(), conf.api_url())
