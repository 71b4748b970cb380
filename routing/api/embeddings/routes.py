"""``POST /v1/embeddings`` on the lean edge: parse, authenticate, rate-limit, then
routing/call/embeddings.py."""

from __future__ import annotations

from core.money import money_json
from routing.access.ratelimit import check_rate
from routing.api.auth import api_key_of
from routing.api.http import JsonResponse, Request, Response
from routing.call import embeddings


async def create(request: Request) -> Response:
    api_key = await api_key_of(request)
    parsed = embeddings.parse_embedding_request(request.body)
    await check_rate(api_key_id=api_key.pk, limit=api_key.rpm_limit)
    result = await embeddings.create(
        api_key=api_key, request=parsed, task_header=request.header("x-skillgate-task")
    )
    record = result.record
    headers = {
        "x-skillgate-route": record.route,
        "x-skillgate-served-by": record.served_by,
        "x-skillgate-verdict": record.verdict,
        "x-skillgate-overhead-ms": f"{record.overhead_ms:.2f}",
        "x-skillgate-cost-usd": money_json(record.cost_usd) or "",
        "x-skillgate-invocation": str(record.id),
    }
    return JsonResponse(result.payload, headers=headers)
