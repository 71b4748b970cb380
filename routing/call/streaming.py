"""``stream=true``: Server-Sent Events.

A student answer that must be verified is produced whole, verified, and only then sent (as
chunks, all in one write of the body); a teacher answer, or a student answer with nothing to verify,
streams through as it arrives. Usage comes from the upstream's final usage chunk and is forwarded
when the client asked for it (``stream_options.include_usage``), as OpenAI does.

A chunk streamed through is parsed (the ledger needs its content, tool calls and usage) but sent on
as the upstream's own bytes with the gateway's completion id put in, when the backend was called
directly (routing/call/openai_client.py); a chunk that must change otherwise (usage the client did not
ask for) is rebuilt. When the client goes away mid-stream the upstream response is closed, so the
provider stops generating, and what was spent is still recorded.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from routing.budgets import Hold
from routing.call import upstream
from routing.call.events import IdSwap, UpstreamStream
from routing.call.gateway import (
    Prepared,
    Result,
    complete_call,
    extender,
    finish,
    legs_planned,
    reserve_budget,
    save,
)
from routing.call.legs import charge_attempts, charge_bound, leg_attempts, new_leg, price_leg, run_leg, verify
from routing.call.pieces import Last, Whole
from routing.errors import ApiError, UpstreamError
from routing.ledger import CallRecord
from routing.models import Backend, Invocation
from routing.pricing import Usage

DONE = b"data: [DONE]\n\n"
_LAST_DONE = Last(DONE)


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def replayed(chunks: list[dict[str, Any]]) -> bytes:
    """A whole answer's events and the ``[DONE]`` after them, as one piece of the body."""
    return b"".join([*map(sse, chunks), DONE])


@dataclass
class Accumulator:
    """Rebuilds the assistant message and usage from streamed deltas."""

    content: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str = "stop"
    usage: dict[str, Any] | None = None
    service_tier: Any = None  # the tier the provider says it served (and bills) the call at

    def add(self, chunk: dict[str, Any]) -> None:
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("service_tier") is not None:
            self.service_tier = chunk["service_tier"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                slot = self.tool_calls.setdefault(
                    call.get("index", 0),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                slot["id"] = call.get("id") or slot["id"]
                function = call.get("function") or {}
                slot["function"]["name"] += function.get("name") or ""
                slot["function"]["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return message


def completion_chunks(
    completion_id: str,
    model: str,
    message: dict[str, Any],
    finish_reason: str,
    usage: dict[str, Any] | None,
    *,
    more: Sequence[tuple[dict[str, Any], str]] = (),
) -> list[dict[str, Any]]:
    """A whole (verified) answer as the chunks a streaming upstream would have sent; ``more``: the
    further choices of an ``n`` > 1 call, each under its own choice index."""
    base = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    chunks = []
    for index, (answer, reason) in enumerate([(message, finish_reason), *more]):
        delta: dict[str, Any] = {"role": "assistant", "content": answer.get("content") or ""}
        if answer.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(answer["tool_calls"])]
        chunks += [
            {**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]},
            {**base, "choices": [{"index": index, "delta": {}, "finish_reason": reason}]},
        ]
    if usage is not None:
        chunks.append({**base, "choices": [], "usage": usage})
    return chunks


@dataclass
class StreamPlan:
    headers: dict[str, str]
    body: AsyncIterator[bytes]


def _headers(record: CallRecord, served_by: str, verdict: str, overhead_ms: float) -> dict[str, str]:
    return {
        "x-skillgate-route": record.route,
        "x-skillgate-served-by": served_by,
        "x-skillgate-verdict": verdict,
        "x-skillgate-fallback": "true" if record.route != served_by else "false",
        "x-skillgate-overhead-ms": f"{overhead_ms:.2f}",
        "x-skillgate-invocation": str(record.id),
        **({"x-skillgate-cache-write": record.cache_write} if record.cache_write else {}),
    }


async def stream_call(prep: Prepared) -> StreamPlan:
    if prep.request.choice_count > 1 or any(prep.plan.samples(b) > 1 for b in legs_planned(prep)):
        # A best-of-n backend chooses among whole answers, and each of n choices is verified whole
        # (routing/call/legs.py verify_choices), so the call runs whole and is then sent.
        return _replay_result(prep, await complete_call(prep))
    hold = await reserve_budget(prep)
    record = prep.new_record()
    completion_id = f"chatcmpl-{record.id.hex}"
    want_usage = bool(prep.request.stream_options and prep.request.stream_options.include_usage)
    try:
        if prep.decision.route == Invocation.Route.STUDENT and prep.verifier is not None:
            assert prep.student is not None
            done = await run_leg(prep.plan, record, prep.student, extend=extender(prep, hold))
            if done is not None and record.legs[-1].verdict == Invocation.Verdict.PASS:
                return await _replay_verified(prep, record, hold, done, completion_id, want_usage)
            if prep.decision.policy == "forced":
                return await _replay_unverified_or_fail(prep, record, hold, done, completion_id, want_usage)
            backends = [prep.teacher]
        elif prep.decision.route == Invocation.Route.STUDENT:
            assert prep.student is not None
            backends = [prep.student] if prep.decision.policy == "forced" else [prep.student, prep.teacher]
        else:
            backends = [prep.teacher]
        return await _stream_through(prep, record, hold, backends, completion_id, want_usage)
    except BaseException as exc:
        if record.status_code == 200:
            record.status_code = exc.status if isinstance(exc, ApiError) else 500
            record.error = record.error or str(exc)
            record.verdict = Invocation.Verdict.ERROR
        finish(record, prep, sum(leg.latency_ms for leg in record.legs))
        await save(record, hold)
        raise


async def _replay_verified(
    prep: Prepared,
    record: CallRecord,
    hold: Hold | None,
    done: upstream.Completion,
    completion_id: str,
    want_usage: bool,
) -> StreamPlan:
    leg = record.legs[-1]
    record.served_by, record.verdict, record.verdict_detail = leg.role, leg.verdict, leg.detail
    served = prep.student if leg.role == Invocation.Route.STUDENT else prep.teacher
    record.cache_write = prep.plan.cache_write(served) if served is not None else ""
    record.response = {"message": done.message, "finish_reason": done.finish_reason}
    finish(record, prep, leg.latency_ms)
    usage = done.raw.get("usage") if want_usage else None
    chunks = completion_chunks(completion_id, leg.model, done.message, done.finish_reason, usage)
    # The answer is whole: recorded first (a client that saw the end finds its row), then sent in
    # one write after the head, not one per chunk (each a send through the server and a syscall).
    events = replayed(chunks)
    await save(record, hold)
    return StreamPlan(_headers(record, leg.role, leg.verdict, record.overhead_ms), Whole(events))


def _replay_result(prep: Prepared, result: Result) -> StreamPlan:
    """A call already run whole (and recorded) sent as the chunks of a stream."""
    record, served = result.record, result.served
    want_usage = bool(prep.request.stream_options and prep.request.stream_options.include_usage)
    usage = result.completion.raw.get("usage") if want_usage else None
    message, finish_reason = result.completion.message, result.completion.finish_reason
    more = result.completion.choices[1:] if prep.request.choice_count > 1 else []
    completion_id = f"chatcmpl-{record.id.hex}"
    chunks = completion_chunks(completion_id, served.model, message, finish_reason, usage, more=more)
    return StreamPlan(
        _headers(record, served.role, served.verdict, record.overhead_ms), Whole(replayed(chunks))
    )


async def _replay_unverified_or_fail(
    prep: Prepared,
    record: CallRecord,
    hold: Hold | None,
    done: upstream.Completion | None,
    completion_id: str,
    want_usage: bool,
) -> StreamPlan:
    """A call forced onto the student whose answer failed: send it anyway, marked as failed."""
    if done is None:
        leg = record.legs[-1]
        raise UpstreamError.of_leg(leg.error, leg.error_status)
    return await _replay_verified(prep, record, hold, done, completion_id, want_usage)


async def _stream_through(
    prep: Prepared,
    record: CallRecord,
    hold: Hold | None,
    backends: list[Backend],
    completion_id: str,
    want_usage: bool,
) -> StreamPlan:
    chunks: UpstreamStream | None = None
    for backend in backends:
        leg = new_leg(backend)
        record.legs.append(leg)
        opened = time.perf_counter()
        sent = prep.body_for(backend)
        pricing = prep.plan.pricing(backend, sent)  # the hold's: read once per call
        attempts = leg_attempts(pricing, max_tokens=prep.max_tokens, extend=extender(prep, hold))
        try:
            chunks = await upstream.open_stream(backend, sent, attempts=attempts)
            break
        except UpstreamError as exc:
            leg.latency_ms = (time.perf_counter() - opened) * 1000
            leg.error, leg.error_status, leg.verdict = exc.message, exc.status, Invocation.Verdict.ERROR
            charge_attempts(leg, attempts)
    if chunks is None:
        last = record.legs[-1]
        record.status_code, record.error, record.verdict = (
            last.error_status,
            last.error,
            Invocation.Verdict.ERROR,
        )
        raise UpstreamError.of_leg(last.error, last.error_status)
    record.served_by = backend.role
    record.cache_write = prep.plan.cache_write(backend)
    now = time.perf_counter()
    upstream_ms = sum(leg.latency_ms for leg in record.legs) + (now - opened) * 1000
    first_byte_overhead = (now - prep.started) * 1000 - upstream_ms

    async def settle(acc: Accumulator) -> None:
        leg.latency_ms = (time.perf_counter() - opened) * 1000
        message = acc.message()
        if acc.usage is None:
            # Cut off before the usage chunk (client hung up, upstream broke): the provider bills
            # what it generated before it saw the hang-up, which the gateway cannot see, so the
            # attempt is charged its worst case, the leg marked as estimated.
            calls = message.get("tool_calls")
            text = (message.get("content") or "") + (json.dumps(calls) if calls else "")
            seen = upstream.cut_off_usage(pricing.prompt_tokens, text)
            leg.prompt_tokens, leg.completion_tokens = seen.prompt_tokens, seen.completion_tokens
            charge_bound(leg, attempts)
        else:
            usage = Usage.from_openai(acc.usage, acc.service_tier)
            price_leg(leg, pricing, usage, attempts=attempts)
        record.response = {"message": message, "finish_reason": acc.finish_reason}
        if not leg.error:
            await verify(prep.plan, leg, message)
        record.verdict = Invocation.Verdict.ERROR if leg.error else leg.verdict
        record.verdict_detail = leg.detail
        finish(record, prep, sum(leg.latency_ms for leg in record.legs))
        record.overhead_ms = max(0.0, first_byte_overhead)
        await save(record, hold)

    async def body() -> AsyncIterator[bytes]:
        acc = Accumulator()
        ids = IdSwap(completion_id)
        try:
            # The events of one read of the upstream go out in one write (the first read's at once):
            # a send through the server and a syscall per read, not per event.
            async for batch in chunks.batches():
                out: list[bytes] = []
                for chunk, data in batch:
                    acc.add(chunk)
                    if chunk.get("usage") is not None and not chunk.get("choices") and not want_usage:
                        continue
                    if data is not None and (want_usage or "usage" not in chunk):
                        swapped = ids.swap(data, chunk.get("id"))
                        if swapped is not None:
                            out += (b"data: ", swapped, b"\n\n")
                            continue
                    chunk["id"] = completion_id
                    if not want_usage:
                        chunk.pop("usage", None)
                    out.append(sse(chunk))
                if out:
                    yield b"".join(out)
        except UpstreamError as exc:
            leg.error, leg.error_status = exc.message, exc.status
            record.status_code, record.error = exc.status, exc.message
            yield sse(exc.body())
        finally:
            # Hang up on the upstream first (a client that went away: the provider stops generating),
            # then record, before [DONE], so a client that saw the end finds the ledger row; also on
            # a client disconnect (the generator is closed) the row is written.
            try:
                await asyncio.shield(chunks.aclose())
            except Exception:  # a connection that breaks as it closes: nothing left to read anyway
                pass
            finally:
                await settle(acc)
        yield _LAST_DONE

    headers = _headers(record, backend.role, Invocation.Verdict.UNVERIFIED, max(0.0, first_byte_overhead))
    return StreamPlan(headers, body())
