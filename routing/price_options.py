"""A backend's prices for the request parameters that change what a call costs (``Backend.price_options``).

The token prices (``input_cost_per_token`` and the rest) price an ordinary call. A provider bills some
parameters differently, so a backend names their prices here, or a call that uses one is refused with a
400 naming it (routing/pricing.py ``refuse_unpriced``); a prompt-cache marker with no price here is
dropped instead, not sent (routing/prompt_cache.py):

- ``service_tiers``: the multiplier of every token price per tier, e.g. ``{"flex": 0.5, "priority": 2}``
  (OpenAI's ``service_tier``; ``auto`` and ``default`` are 1x and need no entry);
- ``audio_input_cost_per_token`` / ``audio_output_cost_per_token``: audio tokens in (``input_audio``
  parts, an earlier answer's ``audio``) and out (``modalities: ["audio"]``, ``audio``);
- ``web_search_cost_per_call``: the fee of one call with ``web_search_options``;
- ``cache_write_input_cost_per_token`` / ``cache_write_1h_input_cost_per_token``: prompt tokens written
  to the provider's prompt cache (a content part's ``cache_control``, Anthropic-style; ``"ttl": "1h"``
  asks for the one-hour cache; ``/v1/messages`` blocks' breakpoints and ``/v1/responses`` parts'
  ``prompt_cache_breakpoint`` arrive as one), billed above the input price (Anthropic: 1.25x, 2x for an hour).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError

SERVICE_TIERS = "service_tiers"
AUDIO_INPUT = "audio_input_cost_per_token"
AUDIO_OUTPUT = "audio_output_cost_per_token"
WEB_SEARCH = "web_search_cost_per_call"
CACHE_WRITE = "cache_write_input_cost_per_token"
CACHE_WRITE_1H = "cache_write_1h_input_cost_per_token"
PRICES = (AUDIO_INPUT, AUDIO_OUTPUT, WEB_SEARCH, CACHE_WRITE, CACHE_WRITE_1H)
MAX_MULTIPLIER = Decimal(100)

# The admin's help text (a migration names it: the cache-write prices are listed in the docstring above).
HELP = (
    "Prices of the request parameters that change a call's cost, e.g. "
    '{"service_tiers": {"flex": 0.5, "priority": 2}, "audio_input_cost_per_token": 0.00004, '
    '"audio_output_cost_per_token": 0.00008, "web_search_cost_per_call": 0.025}. '
    "A call using a parameter priced nowhere here is refused with a 400 naming it."
)


def amount(value: Any, *, where: str) -> Decimal:
    """``value`` as a non-negative decimal (a number or a numeric string); else a ValidationError."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValidationError(f"{where}: must be a number, not {type(value).__name__}.")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ValidationError(f"{where}: {value!r} is not a number.") from None
    if not number.is_finite() or number < 0:
        raise ValidationError(f"{where}: must be a finite number of at least 0.")
    return number


def validate(value: Any) -> None:
    if not isinstance(value, dict):
        raise ValidationError("must be a JSON object.")
    unknown = sorted(set(value) - {SERVICE_TIERS, *PRICES})
    if unknown:
        known = ", ".join((SERVICE_TIERS, *PRICES))
        raise ValidationError(f"unknown price option(s) {', '.join(unknown)}; known: {known}.")
    for name in PRICES:
        if name in value:
            amount(value[name], where=name)
    tiers = value.get(SERVICE_TIERS, {})
    if not isinstance(tiers, dict):
        raise ValidationError(f"{SERVICE_TIERS}: must be an object of tier -> multiplier.")
    for tier, multiplier in tiers.items():
        if amount(multiplier, where=f"{SERVICE_TIERS}.{tier}") > MAX_MULTIPLIER:
            raise ValidationError(f"{SERVICE_TIERS}.{tier}: at most {MAX_MULTIPLIER}.")
