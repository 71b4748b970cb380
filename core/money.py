"""Money, one way everywhere: ``money_json`` for machines (the MCP tools, /api/, exports) and
``money_display`` for people (the dashboard's ``usd`` filter, chart axes).

A ledger amount is a ``Decimal`` with eight places (``routing.models.money``); ``str()`` of such a
zero is ``"0E-8"`` and of a small amount ``"8.4E-7"``: exponent notation no client expects. So:

- ``money_json``: a plain decimal string with exactly the column's eight places (``"0.00000000"``,
  ``"0.00008405"``, ``"-12.50000000"``), exact (no float), sortable as text within a sign; None stays None.
- ``money_display``: ``$1,234.57``, ``$0.25``, ``$0.0000841``, ``-$0.000112``: three significant digits
  under a dollar in plain decimals, cents above, the sign first; ``—`` when there is nothing to show.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

PLACES = 8  # the ledger's money columns: DecimalField(max_digits=16, decimal_places=8)
MONEY_DIGITS = 3  # significant digits shown of an amount under a dollar
DASH = "—"
_QUANTUM = Decimal(1).scaleb(-PLACES)


def _decimal(value: object) -> Decimal | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return amount if amount.is_finite() else None


def money_json(value: object) -> str | None:
    """The exact amount as a plain decimal string of eight places; None for nothing (None, '', NaN)."""
    amount = _decimal(value)
    if amount is None:
        return None
    text = f"{amount.quantize(_QUANTUM, rounding=ROUND_HALF_UP):f}"
    return "0." + "0" * PLACES if text.lstrip("-") == "0." + "0" * PLACES else text


def money_display(value: object) -> str:
    """The dashboard's one money format (see the module)."""
    amount = _decimal(value)
    if amount is None:
        return DASH
    if amount == 0:
        return "$0"
    sign, size = ("-" if amount < 0 else ""), abs(amount)
    if size >= 1:
        return f"{sign}${size.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,.2f}"
    places = max(2, MONEY_DIGITS - 1 - size.adjusted())
    text = f"{size.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):f}"
    whole, _, cents = text.partition(".")
    return f"{sign}${whole}.{cents.rstrip('0').ljust(2, '0')}"
