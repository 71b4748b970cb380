"""Formatting filters of the dashboard templates."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django import template

from core.money import money_display

register = template.Library()

DASH = "—"


@register.filter
def pct(value: float | None, digits: int = 1) -> str:
    """0.934 -> '93.4%'; None (nothing to divide) -> '—'."""
    if value is None:
        return DASH
    return f"{value * 100:.{digits}f}%"


@register.filter
def usd(value: Decimal | float | str | None) -> str:
    """The dashboard's one money format (``core.money.money_display``, shared with the charts): ``$1,234.57``,
    ``$0.25``, ``$0.0000841``, ``-$0.000112``; nothing to show (None, '', not a number) -> '—'."""
    return money_display(value)


PRETTY_MAX = 1_000_000  # characters of a JSON text worth parsing for display


def _parsed(text: str) -> Any:
    """``text`` as JSON when it is a JSON object or array, else None."""
    stripped = text.strip()
    if stripped[:1] not in ("{", "[") or len(stripped) > PRETTY_MAX:
        return None
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return None


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON; a string that holds a JSON object or array (a body stored as text) is shown as
    that JSON, not as one escaped line."""
    if isinstance(value, str):
        parsed = _parsed(value)
        if parsed is None:
            return value
        value = parsed
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return str(value)


def _texts(response: Any) -> list[str]:
    """The answer's text parts: OpenAI chat (choices[].message.content), Anthropic Messages
    (content[].text) and OpenAI Responses (output[].content[].text)."""
    if not isinstance(response, dict):
        return []
    found: list[str] = []
    for choice in response.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            found.append(message["content"])
    blocks = list(response.get("content") or []) if isinstance(response.get("content"), list) else []
    for item in response.get("output") or []:
        if isinstance(item, dict) and isinstance(item.get("content"), list):
            blocks.extend(item["content"])
    found += [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
    return found


@register.filter
def answer_text(response: Any) -> str:
    """The answer a model gave, as text (pretty-printed when it is JSON); '' when there is none."""
    return "\n\n".join(pretty_json(text) for text in _texts(response))
