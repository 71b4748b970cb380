"""API release v2: expects prices as a nested money object. The database migration that would add
it was never shipped, so every uncached item request fails with KeyError: 'price' (a bad deploy)."""

from __future__ import annotations

from typing import Any

VERSION = "v2"


def render_item(row: dict[str, Any]) -> dict[str, Any]:
    money = row["price"]
    return {"id": row["id"], "name": row["name"], "price": money["amount"], "currency": money["currency"]}
