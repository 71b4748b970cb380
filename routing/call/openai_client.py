"""The direct client: backends that speak OpenAI's chat-completions protocol natively, without litellm.

A backend whose litellm model string is ``openai/<model>`` (OpenAI, or any OpenAI-compatible server at
its ``api_base``) or ``hosted_vllm/<model>`` (vLLM) is called here: one POST of the body as the caller
sent it (already allow-listed, routing/protocol.py) to ``{api_base}/chat/completions`` through one
pooled ``httpx.AsyncClient`` per event loop, parsed with orjson. litellm's per-call work (parameter
mapping, response objects, stream wrappers, logging) cost 2.7 ms of CPU a whole call and 13 ms a
streamed one here (bench/upstream_client.py); this costs 0.5 and 1.
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
import functools
import json
import random
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from routing import conf
from routing.call.attempts import Attempts, billed_status, billed_transport_error
from routing.errors import UpstreamError, too_long
from routing.models import Backend

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
_USER_AGENT = "skillgate"
_PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


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


# --- the pooled client ---------------------------------------------------------------------------

_clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client of the process: building one reads the CA bundle (~30 ms),
    which a Celery task's ``asyncio.run`` (a new loop, so a new client) would otherwise pay each time."""
    return httpx.create_ssl_context()


def _new_client() -> httpx.AsyncClient:
    upstream = conf.get().upstream
    limits = httpx.Limits(
        max_connections=upstream.max_connections,
        max_keepalive_connections=upstream.max_keepalive,
        keepalive_expiry=upstream.keepalive_s,
    )
    return httpx.AsyncClient(
        limits=limits, headers={"user-agent": _USER_AGENT}, follow_redirects=False, verify=_tls()
    )


def client() -> httpx.AsyncClient:
    """The running event loop's pooled client (the server's one loop keeps its connections alive).

    A loop that was closed (``asyncio.run`` in a Celery task) drops its client when the next loop
    asks for one: its connections can no longer be used, and their sockets close as they are freed.
    """
    loop = asyncio.get_running_loop()
    found = _clients.get(loop)
    if found is not None and not found.is_closed:
        return found
    for other in [other for other in _clients if other.is_closed()]:
        del _clients[other]
    made = _clients[loop] = _new_client()
    return made


async def aclose_clients() -> None:
    """Close the running loop's client (tests, a server's shutdown)."""
    found = _clients.pop(asyncio.get_running_loop(), None)
    if found is not None:
        await found.aclose()


# --- requests and errors -------------------------------------------------------------------------


def _where(backend: Backend) -> str:
    return f"{backend.role} backend {backend.name!r}"


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else ""


def _error_text(response: httpx.Response) -> str:
    """The upstream's own words for a failure: OpenAI's ``error.message``, vLLM's ``message``, else the
    first line of the body."""
    try:
        data = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return _first_line(response.text) or response.reason_phrase
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _first_line(error["message"])
        if isinstance(error, str):
            return _first_line(error)
        if isinstance(data.get("message"), str):
            return _first_line(data["message"])
    return _first_line(response.text)


def status_error(backend: Backend, status: int, reason: str) -> UpstreamError:
    message = f"The {_where(backend)} failed ({status}): {reason or 'no detail'}"
    return UpstreamError(message, refused=too_long(status, reason))


def transport_error(backend: Backend, exc: Exception) -> UpstreamError:
    """A connection error or a timeout (httpx's), as routing/call/upstream.py words litellm's."""
    reason = _first_line(str(exc)) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        limit = f" (no answer within {backend.timeout_s:g} s)"
        return UpstreamError(f"The {_where(backend)} timed out: {type(exc).__name__}{limit}", timeout=True)
    return UpstreamError(f"The {_where(backend)} failed ({type(exc).__name__}): {reason}")


def encode_body(target: Target, body: dict[str, Any], *, stream: bool) -> bytes:
    payload = {"model": target.model, **{k: v for k, v in body.items() if k not in target.drop}}
    if stream:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    try:
        return orjson.dumps(payload)
    except TypeError:  # an integer past 64 bits (a seed, say): the standard library writes any
        return json.dumps(payload, separators=(",", ":")).encode()


def _retry_delay(response: httpx.Response | None, retries_done: int) -> float:
    if response is not None:
        for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            value = response.headers.get(header)
            try:
                seconds = float(value) * scale if value is not None else -1.0
            except ValueError:
                seconds = -1.0
            if 0 < seconds <= _MAX_RETRY_AFTER_S:
                return seconds
    delay = min(_INITIAL_DELAY_S * 2.0**retries_done, _MAX_DELAY_S)
    return delay * (1 - 0.25 * random.random())


def _should_retry(response: httpx.Response) -> bool:
    hint = response.headers.get("x-should-retry")
    if hint in ("true", "false"):
        return hint == "true"
    return response.status_code in _RETRY_STATUSES or response.status_code >= 500


async def send(
    backend: Backend,
    target: Target,
    body: dict[str, Any],
    *,
    stream: bool,
    attempts: Attempts | None = None,
) -> httpx.Response:
    """POST the call (retrying as the target's provider did under litellm): the response, its status
    2xx; with ``stream``, its body not read yet (the caller closes it). Raises UpstreamError.
    ``attempts`` counts each attempt, and those billed without usage; a retry only when it may."""
    attempts = attempts if attempts is not None else Attempts()
    http = client()
    content = encode_body(target, body, stream=stream)
    headers = {
        "authorization": target.authorization,
        "content-type": "application/json",
        "accept": "text/event-stream" if stream else "application/json",
    }
    timeout = httpx.Timeout(backend.timeout_s)
    retries_done = 0
    while True:
        try:
            request = http.build_request(
                "POST", target.url, content=content, headers=headers, timeout=timeout
            )
        except httpx.InvalidURL as exc:  # an api_base that is not a URL
            raise transport_error(backend, exc) from exc
        attempts.started()
        try:
            response = await http.send(request, stream=stream)
        except httpx.UnsupportedProtocol as exc:  # no http(s):// in the api_base: retrying cannot help
            raise transport_error(backend, exc) from exc
        except httpx.TransportError as exc:
            if billed_transport_error(exc):
                attempts.billed_without_usage()
            if retries_done < target.retries and await attempts.may_retry():
                await asyncio.sleep(_retry_delay(None, retries_done))
                retries_done += 1
                continue
            raise transport_error(backend, exc) from exc
        if response.status_code < 300:
            return response
        if billed_status(response.status_code):
            attempts.billed_without_usage()
        try:
            await response.aread()
        except httpx.TransportError as exc:
            raise transport_error(backend, exc) from exc
        finally:
            await response.aclose()
        if retries_done < target.retries and _should_retry(response) and await attempts.may_retry():
            await asyncio.sleep(_retry_delay(response, retries_done))
            retries_done += 1
            continue
        raise status_error(backend, response.status_code, _error_text(response))


async def post_json(
    backend: Backend, target: Target, body: dict[str, Any], *, attempts: Attempts | None = None
) -> dict[str, Any]:
    """A whole (not streamed) completion, as the upstream's JSON object. An answer that cannot be read
    (a reset mid-body, not JSON) was still processed: it counts as billed without usage."""
    attempts = attempts if attempts is not None else Attempts()
    response = await send(backend, target, body, stream=False, attempts=attempts)
    try:
        data = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        attempts.billed_without_usage()
        raise status_error(
            backend, response.status_code, f"not a JSON answer: {_first_line(response.text)!r}"
        ) from None
    if not isinstance(data, dict):
        attempts.billed_without_usage()
        raise status_error(backend, response.status_code, "not a JSON object")
    if data.get("error"):
        attempts.billed_without_usage()
        raise status_error(backend, response.status_code, _error_text(response))
    return data


# --- streams -------------------------------------------------------------------------------------

Event = tuple[dict[str, Any], bytes | None]


class UpstreamStream:
    """A streamed answer being received: iterate it for chunk dicts, or :meth:`events` for
    ``(chunk, data)`` where ``data`` is the event's JSON as the upstream sent it (None when the chunk
    was rebuilt, by litellm). :meth:`aclose` hangs up on the upstream, which stops generating."""

    def __init__(self, events: AsyncIterator[Event], close: Callable[[], Awaitable[None]]) -> None:
        self._events = events
        self._close = close

    def events(self) -> AsyncIterator[Event]:
        return self._events

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[dict[str, Any]]:
        try:
            async for chunk, _ in self._events:
                yield chunk
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        try:
            aclose = getattr(self._events, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            await self._close()


async def _data(response: httpx.Response) -> AsyncIterator[bytes]:
    """The ``data`` of each Server-Sent Event (lines joined), until ``[DONE]``; other fields and
    comments are skipped. After ``[DONE]`` the body is read to its end, so the connection is reused."""
    pending, done = b"", False
    parts: list[bytes] = []
    async for piece in response.aiter_bytes():
        if done:
            continue
        lines = (pending + piece).split(b"\n")
        pending = lines.pop()
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if parts:
                    data = parts[0] if len(parts) == 1 else b"\n".join(parts)
                    parts = []
                    if data == b"[DONE]":
                        done = True
                        break
                    yield data
            elif line.startswith(b"data:"):
                value = line[5:]
                parts.append(value[1:] if value.startswith(b" ") else value)
    if not done:
        if pending.startswith(b"data:"):
            value = pending[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
        data = b"\n".join(parts).strip()
        if data and data != b"[DONE]":
            yield data


async def open_stream(
    backend: Backend, target: Target, body: dict[str, Any], *, attempts: Attempts | None = None
) -> UpstreamStream:
    """Start a streamed call: failures before the first event raise UpstreamError here, later ones
    while iterating."""
    response = await send(backend, target, body, stream=True, attempts=attempts)

    async def events() -> AsyncIterator[Event]:
        try:
            async for data in _data(response):
                try:
                    chunk = orjson.loads(data)
                except orjson.JSONDecodeError:
                    raise status_error(
                        backend, response.status_code, "sent an event that is not JSON"
                    ) from None
                if not isinstance(chunk, dict):
                    continue
                error = chunk.get("error")
                if error and "choices" not in chunk:
                    # vLLM and others report a failure mid-stream as an event: {"error": {...}}
                    message = error.get("message") if isinstance(error, dict) else error
                    code = error.get("code") if isinstance(error, dict) else None
                    status = code if isinstance(code, int) and 400 <= code < 600 else 500
                    raise status_error(backend, status, _first_line(str(message)))
                yield chunk, data
        except httpx.TransportError as exc:
            raise transport_error(backend, exc) from exc
        finally:
            await response.aclose()

    return UpstreamStream(events(), response.aclose)


class IdSwap:
    """Puts the gateway's completion id into chunks passed through as the upstream sent them.

    ``swap(data, upstream_id)`` is ``data`` with the upstream's id replaced, or None when that cannot be
    done safely (then the chunk is rebuilt): the id must be a plain token (letters, digits, ``-_.``)
    found exactly once. The quoted id matches the ``id`` field itself; anywhere else it can only match
    inside a string ending in an escaped quote and the id, which makes two occurrences, so no swap."""

    def __init__(self, ours: str) -> None:
        self._ours = orjson.dumps(ours)
        self._id: Any = None
        self._needle: bytes | None = None

    def swap(self, data: bytes, upstream_id: Any) -> bytes | None:
        if upstream_id != self._id:
            self._id = upstream_id
            plain = isinstance(upstream_id, str) and _PLAIN_ID.fullmatch(upstream_id) is not None
            self._needle = b'"' + upstream_id.encode() + b'"' if plain else None
        if self._needle is None or data.count(self._needle) != 1:
            return None
        return data.replace(self._needle, self._ours)
