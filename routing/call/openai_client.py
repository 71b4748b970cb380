"""The direct client: backends that speak OpenAI's chat-completions protocol natively, without litellm.

A backend whose litellm model string is ``openai/<model>`` (OpenAI, or any OpenAI-compatible server at
its ``api_base``) or ``hosted_vllm/<model>`` (vLLM) is called here: one POST of the body as the caller
sent it (already allow-listed, routing/protocol.py) to ``{api_base}/chat/completions`` through the
gateway's HTTP client (routing/call/http/: one pooled aiohttp session per event loop), parsed with
orjson. litellm's per-call work (parameter mapping, response objects, stream wrappers, logging) cost
2.7 ms of CPU a whole call and 13 ms a streamed one; this cost 0.5 and 1 on httpx, and about 0.3 and
0.6 on aiohttp, whose pool does not grow with its connections (bench/results/upstream_client.md).
Every other provider (anthropic/, bedrock/, vertex_ai/, gemini/, ...) and the OpenAI models whose
parameters litellm rewrites (o-series, gpt-5: ``max_completion_tokens``, fixed temperature) still go
through litellm (routing/call/upstream.py decides with :func:`target_of`).

What upstream receives is what litellm sent (model without its provider prefix, the same parameters,
``stream_options.include_usage`` on streams), less two of litellm's rewrites for vLLM: tool schemas are
sent as given (litellm strips ``strict`` and ``additionalProperties: false``, a Gemini workaround).
Parameters litellm drops for these providers are dropped too: ``verbosity`` (gpt-5 only), ``user``
for a model not OpenAI's own, ``reasoning_effort`` for OpenAI's own (non-reasoning) models.

Failures become :class:`routing.errors.UpstreamError` worded as routing/call/upstream.py words litellm's
(502 naming the backend's role and name and the upstream's status, 504 on a timeout). ``openai/``
backends are retried as the openai SDK under litellm retried them (twice, on connection errors,
timeouts, 408/409/429/5xx, before any byte of the answer); vLLM backends are not (litellm did not),
so a student that is down falls back to the teacher at once. Each attempt is counted, and a retry after
one that may have been billed needs room in the call's budget hold (routing/call/attempts.py).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from routing import conf
from routing.call.attempts import Attempts, billed_status
from routing.call.events import Batch, Event, IdSwap, UpstreamStream
from routing.call.http import exchange, pool
from routing.call.http.exchange import Answer
from routing.call.http.failures import TransportFailure
from routing.call.sse import EventTooLarge, batches_of
from routing.errors import UpstreamError, too_long
from routing.models import Backend

__all__ = [
    "Event",
    "IdSwap",
    "Target",
    "UpstreamStream",
    "aclose_clients",
    "client",
    "open_stream",
    "post_json",
    "send",
    "status_error",
    "target_of",
    "transport_error",
]

OPENAI_BASE = "https://api.openai.com/v1"
_ENDPOINT = "/chat/completions"
# Providers whose wire protocol is OpenAI's own: how many retries litellm's transport made for each.
_RETRIES = {"openai": 2, "hosted_vllm": 0}
# The openai SDK's backoff: 0.5 s doubling to 8 s, up to a quarter less (jitter); Retry-After up to 60 s.
_INITIAL_DELAY_S, _MAX_DELAY_S, _MAX_RETRY_AFTER_S = 0.5, 8.0, 60.0
_RETRY_STATUSES = frozenset({408, 409, 429})
# Parameters litellm drops for these providers (drop_params=True): sent on, they could be refused.
_DROP_ALWAYS = frozenset({"verbosity"})  # a gpt-5 parameter, and gpt-5 goes through litellm
_DROP_OPENAI = _DROP_ALWAYS | {"reasoning_effort"}  # OpenAI's non-reasoning models refuse it
_DROP_COMPATIBLE = _DROP_ALWAYS | {"user"}  # not every OpenAI-compatible server takes it


@dataclass(frozen=True)
class Target:
    """Where and how one backend is called directly."""

    provider: str
    url: str
    model: str
    authorization: str
    drop: frozenset[str]
    retries: int


def _reasoning_model(name: str) -> bool:
    """OpenAI models whose parameters litellm rewrites (o1/o3/o4..., gpt-5, gpt-6), or that litellm
    serves through another API (audio, search, realtime, the Responses bridge)."""
    lowered = name.lower()
    if len(lowered) > 1 and lowered[0] == "o" and lowered[1].isdigit():
        return True
    markers = ("gpt-5", "gpt-6", "audio", "search", "realtime")
    return any(marker in lowered for marker in markers) or lowered.startswith("responses/")


def _openai_catalog(name: str) -> bool:
    """One of OpenAI's own chat models by its name (litellm checks its catalog; this is its gist)."""
    return name.lower().startswith(("gpt-3.5", "gpt-4", "chatgpt-"))


def _url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith(_ENDPOINT) else base + _ENDPOINT


def target_of(backend: Backend) -> Target | None:
    """How to call ``backend`` directly; None when it needs litellm (another provider, a model whose
    parameters litellm translates, the direct client switched off: ``conf.get().upstream.direct_client``)."""
    if not conf.get().upstream.direct_client:
        return None
    provider, sep, model = backend.litellm_model.partition("/")
    if not sep or not model or provider not in _RETRIES:
        return None
    if provider == "hosted_vllm":
        if not backend.api_base:
            return None  # litellm would read HOSTED_VLLM_API_BASE from the environment
        drop = _DROP_COMPATIBLE
    else:
        if _reasoning_model(model):
            return None
        official = not backend.api_base or urlsplit(backend.api_base).hostname == "api.openai.com"
        drop = _DROP_OPENAI if official or _openai_catalog(model) else _DROP_COMPATIBLE
    key = backend.api_key() or "none"  # keys never live in the database
    return Target(
        provider=provider,
        url=_url(backend.api_base or OPENAI_BASE),
        model=model,
        authorization=f"Bearer {key}",
        drop=drop,
        retries=_RETRIES[provider],
    )


# --- requests and errors -------------------------------------------------------------------------

client = pool.session  # the running loop's pooled session (routing/call/http/pool.py)
aclose_clients = pool.aclose


def _where(backend: Backend) -> str:
    return f"{backend.role} backend {backend.name!r}"


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else ""


def _error_text(content: bytes, reason: str) -> str:
    """The upstream's own words for a failure: OpenAI's ``error.message``, vLLM's ``message``, else the
    first line of the body."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return _first_line(content.decode(errors="replace")) or reason
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _first_line(error["message"])
        if isinstance(error, str):
            return _first_line(error)
        if isinstance(data.get("message"), str):
            return _first_line(data["message"])
    return _first_line(content.decode(errors="replace"))


def status_error(backend: Backend, status: int, reason: str) -> UpstreamError:
    message = f"The {_where(backend)} failed ({status}): {reason or 'no detail'}"
    return UpstreamError(message, refused=too_long(status, reason))


def transport_error(backend: Backend, exc: TransportFailure) -> UpstreamError:
    """A connection error or a timeout (routing/call/http/failures.py), as routing/call/upstream.py
    words litellm's."""
    if exc.timeout:
        limit = f" (no answer within {backend.timeout_s:g} s)"
        return UpstreamError(f"The {_where(backend)} timed out: {exc.kind}{limit}", timeout=True)
    return UpstreamError(f"The {_where(backend)} failed ({exc.kind}): {exc.reason or exc.kind}")


def encode_body(target: Target, body: dict[str, Any], *, stream: bool) -> bytes:
    payload = {"model": target.model, **{k: v for k, v in body.items() if k not in target.drop}}
    if stream:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    try:
        return orjson.dumps(payload)
    except TypeError:  # an integer past 64 bits (a seed, say): the standard library writes any
        return json.dumps(payload, separators=(",", ":")).encode()


def _retry_delay(headers: Mapping[str, str] | None, retries_done: int) -> float:
    if headers is not None:
        for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            value = headers.get(header)
            try:
                seconds = float(value) * scale if value is not None else -1.0
            except ValueError:
                seconds = -1.0
            if 0 < seconds <= _MAX_RETRY_AFTER_S:
                return seconds
    delay = min(_INITIAL_DELAY_S * 2.0**retries_done, _MAX_DELAY_S)
    return delay * (1 - 0.25 * random.random())


def _should_retry(answer: Answer) -> bool:
    hint = answer.headers.get("x-should-retry")
    if hint in ("true", "false"):
        return hint == "true"
    return answer.status in _RETRY_STATUSES or answer.status >= 500


async def send(
    backend: Backend,
    target: Target,
    body: dict[str, Any],
    *,
    stream: bool,
    attempts: Attempts | None = None,
) -> Answer:
    """POST the call (retrying as the target's provider did under litellm): the answer, its status
    2xx, its body not read yet (the caller reads or closes it). Raises UpstreamError.
    ``attempts`` counts each attempt, and those billed without usage; a retry only when it may."""
    attempts = attempts if attempts is not None else Attempts()
    content = encode_body(target, body, stream=stream)
    headers = {
        "authorization": target.authorization,
        "content-type": "application/json",
        "accept": "text/event-stream" if stream else "application/json",
    }
    try:
        pool.url_of(target.url)
    except TransportFailure as exc:  # an api_base that is not an http(s) URL: no attempt made
        raise transport_error(backend, exc) from exc
    retries_done = 0
    while True:
        attempts.started()
        try:
            answer = await exchange.post(target.url, content, headers, backend.timeout_s)
        except TransportFailure as exc:
            if exc.billed:
                attempts.billed_without_usage()
            if exc.retryable and retries_done < target.retries and await attempts.may_retry():
                await asyncio.sleep(_retry_delay(None, retries_done))
                retries_done += 1
                continue
            raise transport_error(backend, exc) from exc
        if answer.status < 300:
            return answer
        if billed_status(answer.status):
            attempts.billed_without_usage()
        try:
            content_read = await answer.body()
        except TransportFailure as exc:
            raise transport_error(backend, exc) from exc
        if retries_done < target.retries and _should_retry(answer) and await attempts.may_retry():
            await asyncio.sleep(_retry_delay(answer.headers, retries_done))
            retries_done += 1
            continue
        raise status_error(backend, answer.status, _error_text(content_read, answer.reason))


async def post_json(
    backend: Backend, target: Target, body: dict[str, Any], *, attempts: Attempts | None = None
) -> dict[str, Any]:
    """A whole (not streamed) completion, as the upstream's JSON object. An answer that cannot be read
    (a reset mid-body, not JSON) was still processed: it counts as billed without usage."""
    attempts = attempts if attempts is not None else Attempts()
    answer = await send(backend, target, body, stream=False, attempts=attempts)
    try:
        content = await answer.body()
    except TransportFailure as exc:
        attempts.billed_without_usage()
        raise transport_error(backend, exc) from exc
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        attempts.billed_without_usage()
        text = _first_line(content.decode(errors="replace"))
        raise status_error(backend, answer.status, f"not a JSON answer: {text!r}") from None
    if not isinstance(data, dict):
        attempts.billed_without_usage()
        raise status_error(backend, answer.status, "not a JSON object")
    if data.get("error"):
        attempts.billed_without_usage()
        raise status_error(backend, answer.status, _error_text(content, answer.reason))
    return data


# --- streams -------------------------------------------------------------------------------------


async def open_stream(
    backend: Backend, target: Target, body: dict[str, Any], *, attempts: Attempts | None = None
) -> UpstreamStream:
    """Start a streamed call: failures before the first event raise UpstreamError here, later ones
    while iterating. Closing the stream before its end hangs up on the upstream."""
    answer = await send(backend, target, body, stream=True, attempts=attempts)

    def event_of(data: bytes) -> Event | None:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise status_error(backend, answer.status, "sent an event that is not JSON") from None
        if not isinstance(chunk, dict):
            return None
        error = chunk.get("error")
        if error and "choices" not in chunk:
            # vLLM and others report a failure mid-stream as an event: {"error": {...}}
            message = error.get("message") if isinstance(error, dict) else error
            code = error.get("code") if isinstance(error, dict) else None
            status = code if isinstance(code, int) and 400 <= code < 600 else 500
            raise status_error(backend, status, _first_line(str(message)))
        return chunk, data

    async def batches() -> AsyncIterator[Batch]:
        try:
            async for datas in batches_of(answer.chunks()):
                batch: Batch = []
                for data in datas:
                    try:
                        event = event_of(data)
                    except UpstreamError:
                        if batch:  # the events before the failure are passed on first
                            yield batch
                        raise
                    if event is not None:
                        batch.append(event)
                if batch:
                    yield batch
        except TransportFailure as exc:
            raise transport_error(backend, exc) from exc
        except EventTooLarge as exc:
            raise status_error(backend, answer.status, str(exc)) from None
        finally:
            answer.close()

    async def close() -> None:
        answer.close()

    return UpstreamStream(batches(), close)
