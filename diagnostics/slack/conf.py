"""The bot's settings (read from django.conf; app/settings/ fills them from the environment)."""

from __future__ import annotations

from django.conf import settings
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

OFF_MESSAGE = "The Slack bot is off: set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET to turn it on."


def bot_token() -> str:
    return str(settings.SLACK_BOT_TOKEN or "")


def signing_secret() -> str:
    return str(settings.SLACK_SIGNING_SECRET or "")


def api_url() -> str:
    """The Web API base URL (a local stand-in in tests); always ends with a slash, as slack_sdk expects."""
    url = str(settings.SLACK_API_URL)
    return url if url.endswith("/") else url + "/"


def enabled() -> bool:
    return bool(bot_token() and signing_secret())


def open_needs_role() -> bool:
    return bool(settings.SLACK_OPEN_NEEDS_ROLE)


def command_name() -> str:
    return str(settings.SLACK_COMMAND)


def web_client_for(*, token: str, api_url: str) -> WebClient:
    """Retries a dropped connection (slack_sdk's default) and waits out rate limits (429 Retry-After)."""
    client = WebClient(token=token, base_url=api_url, timeout=15)
    client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=2))
    return client


def web_client() -> WebClient:
    """A Web API client with the bot token; built per use (no module-level singletons)."""
    return web_client_for(token=bot_token(), api_url=api_url())
