"""Running one planned leg of a call: ask the backend, price the answer, verify it.

The gateway's legs (routing/gateway.py, routing/streaming.py) and background samples
(routing/teacher_sampling.py) run here, each from a :class:`routing.calls.CallPlan`.
"""

from __future__ import annotations

import time
from typing import Any

from routing import upstream
from routing.calls import CallPlan
from routing.errors import UpstreamError
from routing.ledger import CallRecord, Leg
from routing.models import Backend, Invocation
from routing.pricing import prices_for, usage_cost
from routing.verifiers.pool import run_verifier


def new_leg(backend: Backend) -> Leg:
    return Leg(backend=backend.name, role=backend.role, model=backend.litellm_model)


def price_leg(leg: Leg, backend: Backend, usage: upstream.Usage) -> None:
    leg.prompt_tokens = usage.prompt_tokens
    leg.completion_tokens = usage.completion_tokens
    leg.cached_tokens = usage.cached_tokens
    leg.cost_usd = usage_cost(prices_for(backend), usage)


async def verify(plan: CallPlan, leg: Leg, message: dict[str, Any]) -> None:
    if plan.verifier is None:
        return
    started = time.perf_counter()
    verdict = await run_verifier(plan.verifier, plan.request_dict, message)  # a bounded pool, off the loop
    leg.verify_ms = (time.perf_counter() - started) * 1000
    leg.verdict = Invocation.Verdict.PASS if verdict.passed else Invocation.Verdict.FAIL
    leg.detail = verdict.detail


async def verify_best_of(plan: CallPlan, leg: Leg, completion: upstream.Completion) -> upstream.Completion:
    """The first of the answers that passes verification, else the first answer, marked failed."""
    verify_ms, first_failure, total = 0.0, "", len(completion.choices)
    for index, (message, _) in enumerate(completion.choices):
        await verify(plan, leg, message)
        verify_ms += leg.verify_ms
        if leg.verdict == Invocation.Verdict.PASS:
            leg.verify_ms = verify_ms
            leg.detail = f"best of {total}: answer {index + 1} passed. {leg.detail}".strip()
            return completion.pick(index)
        first_failure = first_failure or leg.detail
    leg.verify_ms = verify_ms
    leg.detail = f"best of {total}: no answer passed; the first failed: {first_failure}"
    return completion.pick(0)


async def run_leg(plan: CallPlan, record: CallRecord, backend: Backend) -> upstream.Completion | None:
    """One whole (not streamed) leg on ``backend``, appended to ``record``; None when it failed."""
    leg = new_leg(backend)
    record.legs.append(leg)
    body, samples = plan.leg_body(backend), plan.samples(backend)
    try:
        completion = await upstream.complete(backend, body)
    except UpstreamError as exc:
        leg.error, leg.error_status = exc.message, exc.status
        leg.verdict = Invocation.Verdict.ERROR
        return None
    leg.latency_ms = completion.latency_ms
    price_leg(leg, backend, completion.usage)
    if samples > 1 and len(completion.choices) > 1:
        return await verify_best_of(plan, leg, completion)
    await verify(plan, leg, completion.message)
    return completion
