"""Calls to a backend, normalised to OpenAI-shaped dicts.

A backend that speaks OpenAI's protocol natively (``openai/...``, ``hosted_vllm/...``) is called by the
gateway's own pooled client (routing/call/openai_client.py); every other provider through litellm (offline
mode), imported only when such a call is made. Either way a whole answer is a :class:`Completion` and
a streamed one an :class:`UpstreamStream` of chunk dicts, failures an ``UpstreamError``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from routing.call import openai_client, replicas, stream_bounds
from routing.call.attempts import Attempts, billed_status
from routing.call.events import Batch, UpstreamStream
from routing.errors import UpstreamError, too_long
from routing.models import Backend
from routing.pricing import Usage, completion_token_bound
from routing.protocol import UPSTREAM_FIELDS


def _litellm() -> Any:
    import litellm

    litellm.suppress_debug_info = True
    litellm.drop_params = True
    return litellm


@dataclass
class Completion:
    message: dict[str, Any]
    finish_reason: str
    usage: Usage
    latency_ms: float
    raw: dict[str, Any] = field(repr=False)
    # Every answer the backend gave, as (message, finish_reason): more than one for a best-of-n call.
    choices: list[tuple[dict[str, Any], str]] = field(default_factory=list, repr=False)

    def pick(self, index: int) -> Completion:
        """This completion answering with its ``index``-th choice (usage still counts them all)."""
        message, finish_reason = self.choices[index]
        return replace(self, message=message, finish_reason=finish_reason)


def _refuse_strays(body: dict[str, Any]) -> None:
    """A body key outside the OpenAI allow-list is a bug upstream of here (the request parser refuses
    unknown fields), so it raises rather than reach a backend: through litellm it could name a URL, a
    key or a mock; sent directly, it would be a parameter no caller may set."""
    stray = sorted(set(body) - UPSTREAM_FIELDS)
    if stray:
        raise ValueError(f"not an OpenAI parameter, refused before the upstream call: {', '.join(stray)}")


def _call_kwargs(backend: Backend, body: dict[str, Any]) -> dict[str, Any]:
    """litellm's arguments: the body's OpenAI parameters, then the connection that only the operator sets."""
    _refuse_strays(body)
    # No retries inside litellm (its openai client retried twice, unseen): ``_with_retries`` makes them,
    # each counted and held for (routing/call/attempts.py).
    kwargs: dict[str, Any] = {
        **body,
        "model": backend.litellm_model,
        "timeout": backend.timeout_s,
        "max_retries": 0,
    }
    if backend.api_base:
        kwargs["api_base"] = backend.api_base
    kwargs["api_key"] = backend.api_key() or "none"  # keys never live in the database
    if backend.input_cost_per_token is not None:
        kwargs["input_cost_per_token"] = float(backend.input_cost_per_token)
        kwargs["output_cost_per_token"] = float(backend.output_cost_per_token or 0)
    return kwargs


# litellm's providers whose SDK retried each call twice (the openai SDK's default); the others did not.
_LITELLM_RETRIES = {"openai": 2, "azure": 2, "text-completion-openai": 2}


def _billed(exc: Exception) -> bool:
    """Whether a litellm failure may come after the provider processed the attempt: a timeout, a lost
    connection, a 5xx or 408; not a refusal (another 4xx) nor a failure to connect at all."""
    litellm = _litellm()
    status = getattr(exc, "status_code", None)
    if isinstance(exc, litellm.Timeout):
        return True
    if isinstance(status, int) and status >= 400 and not isinstance(exc, litellm.APIConnectionError):
        return billed_status(status)
    # No status: a lost connection may come after the request was sent; only a failure to connect
    # (nothing sent) is free.
    return "connect" not in str(exc).lower() or "reset" in str(exc).lower()


def _retryable(exc: Exception) -> bool:
    litellm = _litellm()
    status = getattr(exc, "status_code", None)
    if isinstance(exc, litellm.Timeout | litellm.APIConnectionError):
        return True
    return isinstance(status, int) and (status in (408, 409, 429) or status >= 500)


async def _with_retries(backend: Backend, attempts: Attempts, call: Any) -> Any:
    """``await call()`` as the provider's SDK retried it (``_LITELLM_RETRIES``), each attempt counted,
    a retry made only when the budget hold covers it (``attempts.may_retry``); raises UpstreamError."""
    retries = _LITELLM_RETRIES.get(backend.litellm_model.partition("/")[0], 0)
    done = 0
    while True:
        attempts.started()
        try:
            return await call()
        except Exception as exc:
            if _billed(exc):
                attempts.billed_without_usage()
            if done < retries and _retryable(exc) and await attempts.may_retry():
                await asyncio.sleep(min(0.5 * 2.0**done, 8.0))  # the openai SDK's backoff
                done += 1
                continue
            raise _upstream_error(backend, exc) from exc


def _upstream_error(backend: Backend, exc: Exception) -> UpstreamError:
    litellm = _litellm()
    timeout = isinstance(exc, litellm.Timeout)
    status = getattr(exc, "status_code", None)
    reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    where = f"{backend.role} backend {backend.name!r}"
    if timeout:
        return UpstreamError(f"The {where} timed out: {reason}", timeout=True)
    refused = too_long(status, reason) or isinstance(exc, litellm.ContextWindowExceededError)
    return UpstreamError(f"The {where} failed ({status or type(exc).__name__}): {reason}", refused=refused)


def _message_dict(message: Any) -> dict[str, Any]:
    data = message.model_dump() if hasattr(message, "model_dump") else dict(message)
    out: dict[str, Any] = {"role": "assistant", "content": data.get("content")}
    if data.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": call["function"].get("arguments") or "",
                },
            }
            for call in data["tool_calls"]
        ]
    return out


def _completion(raw: dict[str, Any], latency_ms: float) -> Completion:
    choices = [(_message_dict(c["message"]), c.get("finish_reason") or "stop") for c in raw["choices"]]
    return Completion(
        message=choices[0][0],
        finish_reason=choices[0][1],
        usage=Usage.from_openai(raw.get("usage"), raw.get("service_tier")),
        latency_ms=latency_ms,
        raw=raw,
        choices=choices,
    )


def cut_off_usage(prompt_tokens: int, completion_text: str) -> Usage:
    """The tokens a stream cut off before its usage chunk shows (client hung up, upstream broke): every
    byte of the upstream body as prompt tokens (``prompt_tokens``: its ``prompt_token_bound``, read once
    per call), every byte of the answer received as completion tokens. Its charge is the attempt's worst
    case (routing/call/legs.py ``charge_bound``)."""
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_token_bound(completion_text))


def count_prompt_tokens(backend: Backend, body: dict[str, Any]) -> int:
    """The prompt's tokens (messages and tools) by litellm's tokenizer of the backend's model (Anthropic's
    count_tokens endpoint; litellm is imported here, in a worker thread)."""
    litellm = _litellm()
    return int(
        litellm.token_counter(
            model=backend.litellm_model, messages=body.get("messages") or [], tools=body.get("tools") or None
        )
    )


async def complete(backend: Backend, body: dict[str, Any], *, attempts: Attempts | None = None) -> Completion:
    """A whole answer from ``backend``; a student's from one of its replicas (routing/call/replicas.py).
    ``attempts``: counts the attempts and those billed without usage, and decides the retries."""
    attempts = attempts if attempts is not None else Attempts()
    if not replicas.balanced(backend):
        return await _complete(backend, body, attempts)
    chosen = replicas.pick(backend)
    try:
        return await _complete(chosen.backend, body, attempts)
    except UpstreamError as exc:
        meant = replicas.failed(chosen, exc)
        if meant is exc:
            raise
        raise meant from exc
    finally:
        chosen.release()


async def _complete(backend: Backend, body: dict[str, Any], attempts: Attempts) -> Completion:
    target = openai_client.target_of(backend)
    if target is None:
        return await _complete_litellm(backend, body, attempts)
    _refuse_strays(body)
    started = time.perf_counter()
    raw = await openai_client.post_json(backend, target, body, attempts=attempts)
    latency_ms = (time.perf_counter() - started) * 1000
    try:
        return _completion(raw, latency_ms)
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        attempts.billed_without_usage()  # answered (so processed), but not with a usage we can read
        raise openai_client.status_error(backend, 200, f"not a chat completion ({exc!r})") from None


async def _complete_litellm(backend: Backend, body: dict[str, Any], attempts: Attempts) -> Completion:
    litellm = _litellm()
    kwargs = _call_kwargs(backend, body)
    started = time.perf_counter()
    response = await _with_retries(backend, attempts, lambda: litellm.acompletion(**kwargs))
    return _completion(response.model_dump(), (time.perf_counter() - started) * 1000)


async def open_stream(
    backend: Backend, body: dict[str, Any], *, attempts: Attempts | None = None
) -> UpstreamStream:
    """Start a streamed call (``stream_options.include_usage`` upstream); failures before the first
    chunk raise UpstreamError here, later ones while iterating. Iterating gives chunk dicts;
    ``events()`` gives them with the upstream's own bytes where there are any; ``aclose()`` hangs up on
    the upstream (a client that went away), which stops it generating. A student's stream comes from
    one of its replicas, counted in flight until the stream ends or is closed. ``attempts`` as for
    :func:`complete`: the attempts to open it."""
    attempts = attempts if attempts is not None else Attempts()
    if not replicas.balanced(backend):
        return stream_bounds.bounded(backend, await _open_stream(backend, body, attempts), body)
    chosen = replicas.pick(backend)
    try:
        stream = await _open_stream(chosen.backend, body, attempts)
    except UpstreamError as exc:
        chosen.release()
        meant = replicas.failed(chosen, exc)
        if meant is exc:
            raise
        raise meant from exc
    except BaseException:
        chosen.release()
        raise

    async def batches() -> AsyncIterator[Batch]:
        try:
            async for batch in stream.batches():
                yield batch
        finally:
            chosen.release()

    async def close() -> None:
        try:
            await stream.aclose()
        finally:
            chosen.release()

    return stream_bounds.bounded(backend, UpstreamStream(batches(), close), body)


async def _open_stream(backend: Backend, body: dict[str, Any], attempts: Attempts) -> UpstreamStream:
    target = openai_client.target_of(backend)
    if target is not None:
        _refuse_strays(body)
        return await openai_client.open_stream(backend, target, body, attempts=attempts)
    litellm = _litellm()
    kwargs = _call_kwargs(backend, body)
    kwargs.update(stream=True, stream_options={"include_usage": True})
    stream = await _with_retries(backend, attempts, lambda: litellm.acompletion(**kwargs))

    async def batches() -> AsyncIterator[Batch]:
        try:
            async for chunk in stream:
                yield [(chunk.model_dump(exclude_none=True), None)]
        except Exception as exc:
            raise _upstream_error(backend, exc) from exc

    async def close() -> None:
        await stream.aclose()

    return UpstreamStream(batches(), close)
