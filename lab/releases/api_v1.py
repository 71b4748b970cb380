"""API release v1: renders an item row from the database."""

from __future__ import annotations

from typing import Any

VERSION = "v1"


def render_item(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "price": row["price_cents"] / 100, "currency": "EUR"}
