"""``POST /v1/chat/completions``, ``GET /v1/models`` and ``GET /v1/openapi.json`` on the lean edge.

Each handler parses, authenticates, calls the gateway (routing/gateway.py, routing/streaming.py) and
returns what to send; every 4xx/5xx is an ApiError, rendered by routing/edge/app.py.
"""

from __future__ import annotations

import time

from routing import gateway, openapi, selectors
from routing.edge.auth import api_key_of
from routing.edge.http import JsonResponse, Request, Response, StreamResponse, call_headers
from routing.protocol import parse_chat_request
from routing.ratelimit import check_rate
from routing.streaming import stream_call


async def chat_completions(request: Request) -> Response:
    api_key = await api_key_of(request)
    chat = parse_chat_request(request.body)
    await check_rate(api_key_id=api_key.pk, limit=api_key.rpm_limit)
    prep = await gateway.prepare(
        api_key=api_key, request=chat, task_header=request.header("x-skillgate-task")
    )
    if chat.stream:
        plan = await stream_call(prep)
        return StreamResponse(plan.body, plan.headers)
    result = await gateway.complete_call(prep)
    record, completion = result.record, result.completion
    choices = [(completion.message, completion.finish_reason)]
    if chat.choice_count > 1:
        choices = completion.choices  # each verified (routing/legs.py verify_choices)
    payload = {
        "id": f"chatcmpl-{record.id.hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": result.served.model,
        "choices": [
            {"index": i, "message": message, "finish_reason": finish_reason}
            for i, (message, finish_reason) in enumerate(choices)
        ],
        "usage": completion.raw.get("usage"),
    }
    headers = call_headers(record)
    return JsonResponse(payload, headers=headers)


async def models(request: Request) -> Response:
    await api_key_of(request)
    return JsonResponse({"object": "list", "data": await selectors.model_list()})


async def openapi_document(request: Request) -> Response:
    """The OpenAPI description of ``/v1`` (public: it holds no data, only the protocol)."""
    return JsonResponse(openapi.document())
