"""Liveness and readiness probes."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest, JsonResponse


async def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _database_ok() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # the probe reports any failure instead of raising
        return f"{type(exc).__name__}: {exc}"
    return None


async def readyz(request: HttpRequest) -> JsonResponse:
    error = await sync_to_async(_database_ok)()
    if error:
        return JsonResponse({"status": "unavailable", "database": error}, status=503)
    return JsonResponse({"status": "ok", "database": "ok"})
