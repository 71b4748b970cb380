"""``POST /v1/chat/completions`` on the lean edge (the chat protocol is the gateway's own:
routing/protocol.py).

Each handler parses, authenticates, calls the gateway (routing/call/gateway.py, routing/call/streaming.py) and
returns what to send; every 4xx/5xx is an ApiError, rendered by routing/api/app.py.
"""

from __future__ import annotations

import time

from routing.access.ratelimit import check_rate
from routing.api.auth import api_key_of
from routing.api.http import JsonResponse, Request, Response, StreamResponse, call_headers
from routing.call import gateway
from routing.call.streaming import stream_call
from routing.protocol import parse_chat_request
from routing.verifiers.vetting import vet_body_schemas


async def create(request: Request) -> Response:
    api_key = await api_key_of(request)
    data = await vet_body_schemas(request.body, owner=str(api_key.pk))  # costed off the loop
    chat = parse_chat_request(request.body, data)
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
        choices = completion.choices  # each verified (routing/call/legs.py verify_choices)
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
