"""The bot's typed settings (``diagnostics.slack.conf.get()``), declared once here (the machinery:
core/conf.py), read from the environment by app/settings/operations.py through these declarations and
checked at start-up (``SlackConfig.ready()``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

from core.conf import cached, load, setting

OFF_MESSAGE = "The Slack bot is off: set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET to turn it on."


@dataclass(frozen=True)
class Slack:
    """The Slack incident bot: off (its endpoint answers 404) until both the token and the secret are set."""

    SECTION: ClassVar[str] = ""
    bot_token: str = setting("SLACK_BOT_TOKEN", env="SLACK_BOT_TOKEN", default="", doc="The bot's token.")
    signing_secret: str = setting(
        "SLACK_SIGNING_SECRET",
        env="SLACK_SIGNING_SECRET",
        default="",
        doc="Checks that a request came from Slack (set both, or neither: start-up says so).",
    )
    api_url: str = setting(
        "SLACK_API_URL",
        env="SLACK_API_URL",
        default="https://slack.com/api/",
        nonempty=True,
        doc="The Web API base URL; only a test or a proxy changes it.",
    )
    command: str = setting(
        "SLACK_COMMAND", env="SLACK_COMMAND", default="/sre", nonempty=True, doc="The slash command."
    )
    alert_channel: str = setting(
        "SLACK_ALERT_CHANNEL",
        env="SLACK_ALERT_CHANNEL",
        default="",
        doc="The channel (id) the router's drift alerts are posted to; empty: none are posted.",
    )
    open_needs_role: bool = setting(
        "SLACK_OPEN_NEEDS_ROLE",
        env="SLACK_OPEN_NEEDS_ROLE",
        default=False,
        doc="On: only Slack members linked to a user who may open incidents (operator role) start diagnoses.",
    )


GROUPS: tuple[type, ...] = (Slack,)

get = cached(lambda: load(Slack))


def check() -> None:
    """Start-up: built and checked now (``SlackConfig.ready()``)."""
    load(Slack)


def bot_token() -> str:
    return get().bot_token


def signing_secret() -> str:
    return get().signing_secret


def api_url() -> str:
    """The Web API base URL (a local stand-in in tests); always ends with a slash, as slack_sdk expects."""
    url = get().api_url
    return url if url.endswith("/") else url + "/"


def enabled() -> bool:
    return bool(bot_token() and signing_secret())


def open_needs_role() -> bool:
    return get().open_needs_role


def command_name() -> str:
    return get().command


def web_client_for(*, token: str, api_url: str) -> WebClient:
    """Retries a dropped connection (slack_sdk's default) and waits out rate limits (429 Retry-After)."""
    client = WebClient(token=token, base_url=api_url, timeout=15)
    client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=2))
    return client


def web_client() -> WebClient:
    """A Web API client with the bot token; built per use (no module-level singletons)."""
    return web_client_for(token=bot_token(), api_url=api_url())
