"""Formatting filters of the dashboard templates."""

from __future__ import annotations

import json
from decimal import Decimal
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


@register.filter
def usd(value: Decimal | float | str | None) -> str:
    """Token prices are fractions of a cent: keep four significant digits below a cent."""
    if value is None or value == "":
        return DASH
    amount = Decimal(str(value))
    if amount == 0:
        return "$0"
    if abs(amount) >= Decimal("0.01"):
        return f"${amount:,.2f}" if abs(amount) >= 100 else f"${amount:.4f}".rstrip("0").rstrip(".")
    return f"${float(amount):.4g}"


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)
