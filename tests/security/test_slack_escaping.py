"""Text that goes to Slack is escaped: a diagnosis cannot ping a channel or hide a link.

The incident text, the system's tool output, the agent's findings, root cause and proposed action
all end up in the thread. Here an attacker controls the first two: the slash command says ``<!here>``
and pings ``<@U0BOSS>``; the process table says ``<!channel>`` and carries a disguised link
``<http://evil.example|click>``, which the diagnosis quotes. Every message the bot posts to the Slack
stand-in is checked: the only control sequences left are the ones the bot writes itself (the opener's
mention, the date token).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from diagnostics.models import Incident, Trajectory
from diagnostics.slack import messages
from diagnostics.toolsets.base import ReadToolset, ToolResult
from diagnostics.toolsets.registry import register_environment
from tests.support.fake_environment import FakeEnvironment, FakeRead
from tests.support.slack_bot import linked

pytestmark = pytest.mark.django_db(transaction=True)

PING_CHANNEL = "<!channel>"
DISGUISED = "<http://evil.example|click>"
OURS = re.compile(r"<@U0OPENER>|<!date\^[^>]*>")  # the bot's own markup


class HostileRead(FakeRead):
    """The fake system, whose process table an attacker wrote: the api's state carries the payload."""

    name = "hostile"

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        if tool == "list_processes":
            return ToolResult(
                tool, params, f"NAME   STATE\napi    FATAL  {PING_CHANNEL} {DISGUISED}\nweb    RUNNING  pid 7"
            )
        return super().call(tool, params)


@register_environment
class HostileEnvironment(FakeEnvironment):
    name = "hostile"

    def read_toolsets(self) -> list[ReadToolset]:
        return [HostileRead()]


def texts_of(message: dict[str, Any]) -> list[str]:
    """Every string Slack would parse as text in a posted message: its text and each text object."""
    found = [str(message.get("text", ""))]

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("type") in ("mrkdwn", "plain_text") and isinstance(value.get("text"), str):
                found.append(value["text"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(message.get("blocks") or [])
    return found


def test_a_hostile_diagnosis_is_escaped_in_every_message(bot, slack_client, queue, settings):
    settings.DIAGNOSTICS_DEFAULT_ENVIRONMENT = "hostile"
    linked("opener", "U0OPENER", approver=False)
    response = slack_client.command(
        "diagnose <!here> the api is down, ask <@U0BOSS> & see <http://evil.example|docs>", user="U0OPENER"
    )
    assert response.status_code == 200
    assert "<!here>" not in response.text and "&lt;!here&gt;" in response.text  # the ack echoes it escaped
    queue.drain()

    incident = Incident.objects.get()
    assert incident.title.startswith("<!here> the api is down")  # stored as typed, escaped on the way out
    assert incident.trajectories.get().status == Trajectory.Status.SUCCEEDED
    posted = bot.posted() + bot.of("chat.update")
    assert len(posted) > 3
    for message in posted:
        for text in texts_of(message):
            assert "<" not in OURS.sub("", text), f"unescaped control sequence in {text!r}"
            assert ">" not in OURS.sub("", text).replace("→", ""), f"unescaped '>' in {text!r}"
    everything = "\n".join(t for m in posted for t in texts_of(m))
    # The attacker's text is still there, as literal text.
    assert "&lt;!here&gt; the api is down" in everything
    assert "&lt;!channel&gt;" in everything and "&lt;http://evil.example|click&gt;" in everything
    assert "&lt;@U0BOSS&gt; &amp; see" in everything
    diagnosis = next(m for m in posted if str(m.get("text", "")).startswith(":white_check_mark: Diagnosis"))
    assert (
        "Root cause:* Process api is FATAL (&lt;!channel&gt; &lt;http://evil.example|click&gt;)"
        in "\n".join(texts_of(diagnosis))
    )  # the diagnosis itself quoted the hostile tool output
    assert "<@U0OPENER>" in posted[0]["text"]  # the bot's own mention of the opener still works

    # The service keeps serving: a normal incident afterwards is posted as before.
    settings.DIAGNOSTICS_DEFAULT_ENVIRONMENT = "fake"
    bot.reset()
    slack_client.command("diagnose the api service is down", user="U0OPENER")
    queue.drain()
    assert any(":mag: `tail_log`" in m["text"] and "DATABASE_URL" in m["text"] for m in bot.posted())


def test_escape_covers_the_three_control_characters_and_clip_never_cuts_an_entity():
    assert (
        messages.escape("<!channel> & <http://evil|click>")
        == "&lt;!channel&gt; &amp; &lt;http://evil|click&gt;"
    )
    assert messages.unescape(messages.escape("a < b & c > d")) == "a < b & c > d"
    clipped = messages.quoted("x" * 8 + "<" * 10, 12)
    assert clipped.endswith("…") and "&" not in clipped.rstrip("…").rsplit(";", 1)[-1]
    assert len(clipped) <= 12
