"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: the Anthropic Messages API on the lean
edge (routing/api/messages/protocol.py translates; the call itself is the chat endpoint's)."""

from __future__ import annotations

import asyncio
import uuid

from routing.access.ratelimit import check_rate
from routing.api.auth import api_key_of
from routing.api.http import JsonResponse, Request, Response, StreamResponse, call_headers
from routing.api.messages import protocol as anthropic
from routing.api.messages.cache import Origins
from routing.api.messages.stream import anthropic_events
from routing.call import body_work, gateway, upstream
from routing.call.plans import teacher_of
from routing.call.streaming import stream_call
from routing.errors import ApiError
from routing.verifiers.vetting import vet_body_schemas


async def create(request: Request) -> Response:
    api_key = await api_key_of(request, anthropic=True)
    data = await vet_body_schemas(request.body, owner=str(api_key.pk))  # costed off the loop
    parsed = anthropic.parse(request.body, anthropic.MessagesRequest, data)
    origins = Origins()
    chat = anthropic.to_chat(parsed, origins)
    await check_rate(api_key_id=api_key.pk, limit=api_key.rpm_limit)
    prep = await gateway.prepare(
        api_key=api_key, request=chat, task_header=request.header("x-skillgate-task"), endpoint="/v1/messages"
    )
    try:  # a refused cache write names the caller's block (messages/cache.py)
        if chat.stream:
            plan = await stream_call(prep)
        else:
            result = await gateway.complete_call(prep)
    except ApiError as exc:
        raise origins.rename(exc) from None
    if chat.stream:
        message_id = f"msg_{plan.headers['x-skillgate-invocation'].replace('-', '')}"
        events = anthropic_events(plan.body, message_id=message_id, model=parsed.model)
        return StreamResponse(events, plan.headers)
    record, completion = result.record, result.completion
    body = anthropic.message_of(
        f"msg_{record.id.hex}",
        parsed.model,
        completion.message,
        completion.finish_reason,
        completion.raw.get("usage"),
    )
    headers = {**call_headers(record), "request-id": f"req_{uuid.uuid4().hex}"}
    return JsonResponse(body, headers=headers)


async def count_tokens(request: Request) -> Response:
    """The prompt's tokens by the teacher's tokenizer (litellm's count, as for a cut-off stream)."""
    key = await api_key_of(request, anthropic=True)
    async with body_work.of(request, key, tokenized=True):  # the key is known only now: its turn here
        return await _count_tokens(request)


async def _count_tokens(request: Request) -> Response:
    parsed = anthropic.parse(request.body, anthropic.CountTokensRequest)
    body = {"messages": anthropic.chat_messages(parsed), **anthropic.chat_tools(parsed)}
    profile_name = request.header("x-skillgate-task") or gateway.DEFAULT_PROFILE
    found = await gateway.profile_and_backends(profile_name)
    teacher = teacher_of(*found) if found is not None else None
    if teacher is None:
        raise ApiError(503, "No teacher backend is configured.", type="server_error", code="no_backend")
    tokens = await asyncio.to_thread(upstream.count_prompt_tokens, teacher, body)
    return JsonResponse({"input_tokens": tokens})
