"""``GET /v1/models``: the models a call may name (``auto`` routes; each active backend by name)."""

from __future__ import annotations

from typing import Any

from routing.api.auth import api_key_of
from routing.api.http import JsonResponse, Request, Response
from routing.call.gateway import AUTO_MODEL
from routing.models import Backend


async def model_list() -> list[dict[str, Any]]:
    models = [{"id": AUTO_MODEL, "object": "model", "created": 0, "owned_by": "skillgate"}]
    async for backend in Backend.objects.filter(is_active=True).order_by("name"):
        models.append({"id": backend.name, "object": "model", "created": 0, "owned_by": backend.role})
    return models


async def list_models(request: Request) -> Response:
    await api_key_of(request)
    return JsonResponse({"object": "list", "data": await model_list()})
