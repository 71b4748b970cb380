"""The endpoint: off until configured, and only correctly signed, fresh requests get through."""

from __future__ import annotations

import json
import time

import httpx

from diagnostics.models import Incident
from diagnostics.slack.models import SlackEvent
from tests.support.slack_bot import SECRET

CHALLENGE = json.dumps({"token": "t", "challenge": "c0ffee", "type": "url_verification"})


def test_the_bot_is_off_until_its_token_and_signing_secret_are_set(
    settings, slack, slack_client, transactional_db
):
    settings.SLACK_BOT_TOKEN, settings.SLACK_SIGNING_SECRET = "", ""
    for path in ("/slack/events", "/slack/commands", "/slack/interactions"):
        response = slack_client.post(CHALLENGE, content_type="application/json", path=path)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "slack_off"
        assert "SLACK_BOT_TOKEN" in response.json()["error"]["message"]
    settings.SLACK_BOT_TOKEN = "xoxb-only-the-token"  # half configured is still off
    assert slack_client.post(CHALLENGE, content_type="application/json").status_code == 404
    assert slack.calls == [] and not SlackEvent.objects.exists()
    assert (
        httpx.get(slack_client.base_url + "/healthz", timeout=10).status_code == 200
    )  # the rest still works


def test_a_correctly_signed_fresh_request_is_answered(bot, slack_client):
    response = slack_client.post(CHALLENGE, content_type="application/json")
    assert response.status_code == 200 and response.json() == {"challenge": "c0ffee"}


def test_bad_and_stale_signatures_are_refused_and_nothing_is_stored(bot, slack_client, queue):
    now = int(time.time())
    attempts = {
        "wrong secret": {"secret": SECRET + "x"},
        "stale (6 minutes old, correctly signed)": {"timestamp": now - 360},
        "from the future": {"timestamp": now + 360},
    }
    for name, options in attempts.items():
        response = slack_client.command("diagnose api down", user="U0ANY", **options)
        assert response.status_code == 401, name
    tampered = slack_client.post(
        CHALLENGE, content_type="application/json", headers={"X-Slack-Signature": "v0=" + "0" * 64}
    )
    assert tampered.status_code == 401
    unsigned = httpx.post(slack_client.base_url + "/slack/events", content=CHALLENGE, timeout=10)
    assert unsigned.status_code == 401
    # Inside the window (4 minutes old) it is accepted.
    assert slack_client.command("diagnose api down", user="U0ANY", timestamp=now - 240).status_code == 200
    assert SlackEvent.objects.count() == 1 and not Incident.objects.exists()
