"""Formatting filters of the dashboard templates."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django import template

register = template.Library()

DASH = "—"


@register.filter
def pct(value: float | None, digits: int = 1) -> str:
    """0.934 -> '93.4%'; None (nothing to divide) -> '—'."""
    if value is None:
        return DASH
    return f"{value * 100:.{digits}f}%"


MONEY_DIGITS = 3  # significant digits of an amount under a dollar


@register.filter
def usd(value: Decimal | float | str | None) -> str:
    """The dashboard's one money format: ``$1,234.57``, ``$0.25``, ``$0.0000841``, ``-$0.000112``.

    Token prices are fractions of a cent, so an amount under a dollar keeps three significant digits
    in plain decimals (never ``8.405e-05``); a dollar or more keeps cents. The sign goes before the
    dollar sign. Nothing to show (None, '', not a number) -> '—'.
    """
    if value is None or value == "":
        return DASH
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return DASH
    if not amount.is_finite():
        return DASH
    if amount == 0:
        return "$0"
    sign, size = ("-" if amount < 0 else ""), abs(amount)
    if size >= 1:
        return f"{sign}${size:,.2f}"
    places = max(2, MONEY_DIGITS - 1 - size.adjusted())
    text = f"{size.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):f}"
    whole, _, cents = text.partition(".")
    return f"{sign}${whole}.{cents.rstrip('0').ljust(2, '0')}"


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)
