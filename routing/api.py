"""The OpenAI-compatible edge: parse, authenticate, call one gateway function, render.

Every 4xx/5xx is an OpenAI error JSON raised as ApiError and rendered here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from routing import gateway, openapi, selectors
from routing.errors import ApiError, unauthorized
from routing.keys import authenticate
from routing.models import ApiKey
from routing.protocol import parse_chat_request
from routing.ratelimit import check_rate
from routing.streaming import stream_call

View = Callable[[HttpRequest], Awaitable[HttpResponse]]


def _method_not_allowed(method: str) -> ApiError:
    return ApiError(405, f"Method {method} is not allowed here.", code="method_not_allowed")


async def _api_key(request: HttpRequest) -> ApiKey:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
    key = await authenticate(token.strip())
    if key is None:
        raise unauthorized("Incorrect or revoked API key.")
    return key


def _read_body(request: HttpRequest) -> bytes:
    limit = settings.SKILLGATE["MAX_BODY_BYTES"]
    declared = request.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"Request body is larger than {limit} bytes.", code="request_too_large")
    body = request.read(limit + 1)
    if len(body) > limit:
        raise ApiError(413, f"Request body is larger than {limit} bytes.", code="request_too_large")
    return body


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    try:
        if request.method != "POST":
            raise _method_not_allowed(request.method or "")
        api_key = await _api_key(request)
        body = _read_body(request)
        chat = parse_chat_request(body)
        await check_rate(api_key_id=api_key.pk, limit=api_key.rpm_limit)
        prep = await gateway.prepare(
            api_key=api_key, request=chat, task_header=request.headers.get("X-Skillgate-Task")
        )
        if chat.stream:
            plan = await stream_call(prep)
            response: HttpResponse | StreamingHttpResponse = StreamingHttpResponse(
                plan.body, content_type="text/event-stream"
            )
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"
            for name, value in plan.headers.items():
                response[name] = value
            return response  # type: ignore[return-value]
        result = await gateway.complete_call(prep)
    except ApiError as exc:
        return exc.response()
    record, completion = result.record, result.completion
    payload = {
        "id": f"chatcmpl-{record.id.hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": result.served.model,
        "choices": [{"index": 0, "message": completion.message, "finish_reason": completion.finish_reason}],
        "usage": completion.raw.get("usage"),
    }
    resp = JsonResponse(payload)
    resp["x-skillgate-route"] = record.route
    resp["x-skillgate-served-by"] = record.served_by
    resp["x-skillgate-verdict"] = record.verdict
    resp["x-skillgate-fallback"] = "true" if record.fallback else "false"
    resp["x-skillgate-overhead-ms"] = f"{record.overhead_ms:.2f}"
    resp["x-skillgate-cost-usd"] = f"{record.cost_usd:.8f}"
    resp["x-skillgate-invocation"] = str(record.id)
    return resp


@csrf_exempt
async def models(request: HttpRequest) -> HttpResponse:
    try:
        if request.method != "GET":
            raise _method_not_allowed(request.method or "")
        await _api_key(request)
    except ApiError as exc:
        return exc.response()
    return JsonResponse({"object": "list", "data": await selectors.model_list()})


async def openapi_document(request: HttpRequest) -> HttpResponse:
    """The OpenAPI description of ``/v1`` (public: it holds no data, only the protocol)."""
    if request.method != "GET":
        return _method_not_allowed(request.method or "").response()
    return JsonResponse(openapi.document())
