"""The router's drift alerts in Slack: one message to ``SLACK_ALERT_CHANNEL`` per newly flagged drift.

Registered with ``routing.router.alerts`` when the bot's app starts (``SlackConfig.ready()``); posts
through the bot's own client (``conf.web_client()``: retries, rate limits). Nothing is sent while the
bot has no token or no alert channel is set. The reason is the drift check's own text, escaped all the
same (a profile's name is an operator's).
"""

from __future__ import annotations

from diagnostics.slack import conf
from diagnostics.slack.messages import quoted
from routing.router.alerts import Alert


def post(alert: Alert) -> None:
    channel = conf.get().alert_channel
    if not channel or not conf.bot_token():
        return
    conf.web_client().chat_postMessage(channel=channel, text=f":warning: {quoted(alert.text, 2900)}")
