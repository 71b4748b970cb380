"""Talking to the Slack bot as Slack does, in tests: signed requests to the real endpoint, the Celery
messages the bot sends captured and run by ``Queue.drain()`` in the test thread (which plays the
worker), and Slack members linked to users.

Requests are signed with Slack's v0 scheme (slack_sdk's SignatureVerifier computes the HMAC); the bot's
outgoing calls go through slack_sdk's WebClient to ``SlackStub`` (tests/support/slack_stub.py). The
fixtures (``bot``, ``queue``, ``slack_client``...) are in tests/conftest.py.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
from django.contrib.auth.models import User
from slack_sdk.signature import SignatureVerifier

from diagnostics.models import ActionRequest
from diagnostics.slack import services
from tests.support.fake_environment import incident_user
from tests.support.slack_stub import TEAM_ID

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "xoxb-test-token"
CHANNEL = "C0INCIDENTS"


@dataclass
class Queue:
    """Celery messages the code sent, run in order by ``drain`` (the test plays the worker)."""

    sent: list[tuple[str, int]] = field(default_factory=list)
    # For each thread sync sent: how many steps its trajectory had committed at that moment.
    steps_at_sync: list[int] = field(default_factory=list)

    def drain(self, limit: int = 500) -> list[tuple[str, int]]:
        from diagnostics.slack.tasks import handle_event, sync_thread
        from diagnostics.tasks import execute_action, run_diagnosis

        run: dict[str, Callable[[int], Any]] = {
            "diagnosis": run_diagnosis,
            "execution": execute_action,
            "event": handle_event,
            "sync": sync_thread,
        }
        done: list[tuple[str, int]] = []
        while self.sent:
            assert len(done) < limit, "the queue does not drain"
            name, pk = self.sent.pop(0)
            run[name](pk)
            done.append((name, pk))
        return done


def linked(username: str, slack_user_id: str, *, approver: bool) -> User:
    """A user (an approver or not) linked to the Slack member ``slack_user_id``."""
    user = incident_user(username, approver=approver)
    services.slack_user_link(slack_user_id=slack_user_id, user=user, team_id=TEAM_ID)
    return user


def slack_proposal(
    bot: Any, slack_client: Any, queue: Any, *, user: str
) -> tuple[ActionRequest, dict[str, Any]]:
    """``user`` opens an incident with /sre, the queue diagnoses it: its proposed action and the bot's
    message proposing it (the bot's record then cleared)."""
    slack_client.command("diagnose the api service is down", user=user)
    queue.drain()
    action = ActionRequest.objects.get()
    message = next(m for m in bot.posted() if m["text"].startswith(f"Proposed action {action.pk}"))
    bot.reset()
    return action, message


@dataclass
class SlackClient:
    """Posts to the endpoint as Slack does: form or JSON bodies, signed with the v0 HMAC."""

    base_url: str
    secret: str = SECRET

    def post(
        self,
        body: str,
        *,
        content_type: str,
        path: str = "/slack/events",
        timestamp: int | None = None,
        secret: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        ts = str(int(time.time()) if timestamp is None else timestamp)
        signature = SignatureVerifier(secret or self.secret).generate_signature(timestamp=ts, body=body)
        sent = {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": str(signature),
            **(headers or {}),
        }
        return httpx.post(self.base_url + path, content=body.encode(), headers=sent, timeout=30)

    def command(self, text: str, *, user: str, channel: str = CHANNEL, **kwargs: Any) -> httpx.Response:
        form = {
            "token": "legacy-verification-token",
            "team_id": TEAM_ID,
            "team_domain": "skillgate-test",
            "channel_id": channel,
            "channel_name": "incidents",
            "user_id": user,
            "user_name": user.lower(),
            "command": "/sre",
            "text": text,
            "api_app_id": "A0APP",
            "response_url": kwargs.pop("response_url", "http://127.0.0.1:9/unused"),
            "trigger_id": uuid.uuid4().hex,
        }
        return self.post(
            urlencode(form),
            content_type="application/x-www-form-urlencoded",
            path="/slack/commands",
            **kwargs,
        )

    def mention(
        self, text: str, *, user: str, event_id: str, ts: str, thread_ts: str = "", **kwargs: Any
    ) -> httpx.Response:
        body = {
            "token": "legacy-verification-token",
            "team_id": TEAM_ID,
            "api_app_id": "A0APP",
            "event": {
                "type": "app_mention",
                "user": user,
                "text": text,
                "ts": ts,
                "channel": CHANNEL,
                "event_ts": ts,
                **({"thread_ts": thread_ts} if thread_ts else {}),
            },
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM_ID, "user_id": "U0BOT", "is_bot": True}],
        }
        return self.post(json.dumps(body), content_type="application/json", **kwargs)

    def click(
        self, message: dict[str, Any], *, action_id: str, user: str, value: str | None = None
    ) -> httpx.Response:
        """Clicks a button of a message the bot posted (as the stub recorded it)."""
        element = next(
            e
            for b in message["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
            if e["action_id"] == action_id
        )
        payload = {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "team_id": TEAM_ID},
            "api_app_id": "A0APP",
            "token": "legacy-verification-token",
            "container": {
                "type": "message",
                "message_ts": message["ts"],
                "channel_id": message["channel"],
                "is_ephemeral": False,
                "thread_ts": message["thread_ts"],
            },
            "trigger_id": uuid.uuid4().hex,
            "team": {"id": TEAM_ID, "domain": "skillgate-test"},
            "channel": {"id": message["channel"], "name": "incidents"},
            "message": {
                "type": "message",
                "ts": message["ts"],
                "thread_ts": message["thread_ts"],
                "blocks": message["blocks"],
            },
            "response_url": "http://127.0.0.1:9/unused",
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": next(b["block_id"] for b in message["blocks"] if b["type"] == "actions"),
                    "text": element["text"],
                    "value": value if value is not None else element["value"],
                    "type": "button",
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }
        return self.post(
            urlencode({"payload": json.dumps(payload)}),
            content_type="application/x-www-form-urlencoded",
            path="/slack/interactions",
        )
