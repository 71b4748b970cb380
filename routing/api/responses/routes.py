"""``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}``, its ``input_items`` and ``cancel``:
the OpenAI Responses API on the lean edge (routing/api/responses/ translates and keeps stored responses on
their ledger rows; the call itself is the chat endpoint's)."""

from __future__ import annotations

import time
import uuid

from core.db import run_sync
from routing import conf
from routing.access.ratelimit import check_rate
from routing.api import responses
from routing.api.auth import api_key_of
from routing.api.http import JsonResponse, Request, Response, StreamResponse, call_headers
from routing.api.messages.cache import Origins
from routing.call import body_work, gateway
from routing.call.streaming import stream_call
from routing.errors import ApiError
from routing.verifiers.vetting import vet_body_schemas

PATH = "/v1/responses"


def _gone(exc: responses.Gone, *, param: str | None = None, code: str = "not_found") -> ApiError:
    return ApiError(404, exc.message, param=param, code=code)


async def _find(response_id: str, api_key_id: int, *, param: str | None = None) -> responses.Stored:
    try:
        return await run_sync(responses.find, response_id, api_key_id)
    except responses.Gone as exc:
        if param is not None:
            message = exc.message.replace("Response with id", "Previous response with id", 1)
            raise _gone(responses.Gone(message), param=param, code="previous_response_not_found") from None
        raise _gone(exc) from None


async def create(request: Request) -> Response:
    api_key = await api_key_of(request)
    data = await vet_body_schemas(request.body, owner=str(api_key.pk))  # costed off the loop
    parsed = responses.parse(request.body, data)
    history, conversation = None, b""
    limits = conf.get().limits
    if parsed.previous_response_id is not None:
        previous = await _find(parsed.previous_response_id, api_key.pk, param="previous_response_id")
        history = responses.history(previous)
        conversation = responses.conversation_json(
            history, request.body, max_elements=limits.max_json_elements
        )
        body_work.planned()  # the body's own turn goes back: the one below holds it with the conversation
        conversation += request.body
    origins = Origins()
    # The stored conversation is walked like a body: its weight waits its turn (call/body_work.py).
    async with body_work.turn(
        conversation, api_key.pk, budget=limits.max_json_elements, wait_s=limits.body_read_timeout_s
    ):
        chat = responses.to_chat(parsed, history, origins)
        await check_rate(api_key_id=api_key.pk, limit=api_key.rpm_limit)
        prep = await gateway.prepare(
            api_key=api_key,
            request=chat,
            task_header=request.header("x-skillgate-task"),
            endpoint="/v1/responses",
        )
    try:  # a refused cache write names the caller's part (its prompt_cache_breakpoint)
        if chat.stream:
            plan = await stream_call(prep)
        else:
            result = await gateway.complete_call(prep)
    except ApiError as exc:
        raise origins.rename(exc) from None
    if chat.stream:
        started = responses.Stored(
            id=uuid.UUID(plan.headers["x-skillgate-invocation"]),
            created_at=time.time(),
            model=parsed.model,
            request=prep.request_dict,
            response=None,
            usage=responses.usage_of(0, 0),
        )
        return StreamResponse(responses.response_events(plan.body, stored=started), plan.headers)
    record = result.record
    done = responses.Stored(
        id=record.id,
        created_at=time.time(),
        model=parsed.model,
        request=prep.request_dict,
        response=record.response,
        usage=responses.usage_of(
            result.served.prompt_tokens, result.served.completion_tokens, result.served.cached_tokens
        ),
    )
    headers = call_headers(record)
    return JsonResponse(responses.response_of(done), headers=headers)


def _response_id(request: Request) -> str:
    """The ``{id}`` of ``/v1/responses/{id}`` and of its sub-resources."""
    return request.path.removeprefix(PATH + "/").split("/", 1)[0]


async def retrieve(request: Request) -> Response:
    api_key = await api_key_of(request)
    stored = await _find(_response_id(request), api_key.pk)
    return JsonResponse(responses.response_of(stored))


async def delete(request: Request) -> Response:
    api_key = await api_key_of(request)
    response_id = _response_id(request)
    try:
        await run_sync(responses.delete, response_id, api_key.pk)
    except responses.Gone as exc:
        raise _gone(exc) from None
    return JsonResponse({"id": response_id, "object": "response.deleted", "deleted": True})


async def input_items(request: Request) -> Response:
    """``GET /v1/responses/{id}/input_items``: the response's input items, paginated as OpenAI's."""
    api_key = await api_key_of(request)
    page = responses.page_of(request.query)
    stored = await _find(_response_id(request), api_key.pk)
    return JsonResponse(responses.items_page(responses.input_items(stored), page))


async def cancel(request: Request) -> Response:
    """``POST /v1/responses/{id}/cancel``. Only a background response can be cancelled, and this
    gateway makes none (``background: true`` is a 400), so a stored response gets OpenAI's 400 for a
    response made in the foreground; an unknown one the 404 of ``GET``."""
    api_key = await api_key_of(request)
    await _find(_response_id(request), api_key.pk)
    raise ApiError(400, "Responses can only be cancelled if they were created with background=true.")
