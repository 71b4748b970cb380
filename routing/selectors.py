"""Reads of the routing tables."""

from __future__ import annotations

from typing import Any

from routing.gateway import AUTO_MODEL
from routing.models import Backend


async def model_list() -> list[dict[str, Any]]:
    models = [{"id": AUTO_MODEL, "object": "model", "created": 0, "owned_by": "skillgate"}]
    async for backend in Backend.objects.filter(is_active=True).order_by("name"):
        models.append({"id": backend.name, "object": "model", "created": 0, "owned_by": backend.role})
    return models
