"""Running one planned leg of a call: ask the backend, price the answer, verify it.

The gateway's legs (routing/call/gateway.py, routing/call/streaming.py) and background samples
(routing/call/sampling.py) run here, each from a :class:`routing.call.plans.CallPlan`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from decimal import Decimal
from typing import Any

from routing.call import upstream
from routing.call.attempts import Attempts
from routing.call.plans import CallPlan, LegPricing
from routing.call.votes import answer_key
from routing.errors import UpstreamError
from routing.ledger import CallRecord, Leg
from routing.models import Backend, Invocation
from routing.pricing import completion_token_bound, usage_cost
from routing.verifiers.pool import run_verifier


def _answer_text(message: dict[str, Any]) -> str:
    """What an answer holds that the provider bills as output: its text and its tool calls."""
    calls = message.get("tool_calls")
    return str(message.get("content") or "") + (json.dumps(calls) if calls else "")


def new_leg(backend: Backend) -> Leg:
    return Leg(backend=backend.name, role=backend.role, model=backend.litellm_model)


Extend = Callable[[Decimal], Awaitable[bool]]


def leg_attempts(
    pricing: LegPricing, *, max_tokens: int, answers: int = 1, extend: Extend | None = None
) -> Attempts:
    """The attempts of one leg sending the body ``pricing`` read (``answers`` answers of at most
    ``max_tokens``): the worst case of one, and how a retry holds more (``extend``; None: no budget to
    hold)."""
    return Attempts(bound_of=lambda: pricing.bound(max_tokens=max_tokens, answers=answers), extend=extend)


def price_leg(
    leg: Leg, pricing: LegPricing, usage: upstream.Usage, *, attempts: Attempts | None = None
) -> None:
    """The leg's cost: its answer's ``usage`` at the prices of its body's parameters (``pricing``: service
    tier, audio, web search), plus the worst case of each earlier attempt billed without usage."""
    leg.prompt_tokens = usage.prompt_tokens
    leg.completion_tokens = usage.completion_tokens
    leg.cached_tokens = usage.cached_tokens
    leg.cost_usd = usage_cost(pricing.prices, usage, pricing.terms)
    if attempts is not None and attempts.bound > 0:  # a usage past the worst case is a lie: charged that
        leg.cost_usd = min(leg.cost_usd, attempts.bound)
    charge_attempts(leg, attempts)


def charge_attempts(leg: Leg, attempts: Attempts | None) -> None:
    """Adds the attempts billed without usage to the leg, at their worst case, and says so."""
    if attempts is None:
        return
    leg.attempts = attempts.sent
    leg.cost_usd += attempts.unmeasured_cost
    if attempts.unmeasured:
        leg.cost_basis = Invocation.CostBasis.BOUND


def charge_bound(leg: Leg, attempts: Attempts) -> None:
    """The leg's last attempt gave no usage (a stream cut before its usage chunk, by the client or the
    upstream): it was billed for all the provider may bill, so it is charged its worst case."""
    attempts.billed_without_usage()
    leg.usage_estimated = True
    leg.cost_usd = Decimal(0)
    charge_attempts(leg, attempts)


async def verify(plan: CallPlan, leg: Leg, message: dict[str, Any]) -> None:
    if plan.verifier is None:
        return
    started = time.perf_counter()
    verdict = await run_verifier(plan.verifier, plan.request_dict, message, owner=plan.owner)  # off the loop
    leg.verify_ms = (time.perf_counter() - started) * 1000
    if verdict.error:  # nothing was judged: neither a pass nor the answer's failure
        leg.verdict = Invocation.Verdict.ERROR
    else:
        leg.verdict = Invocation.Verdict.PASS if verdict.passed else Invocation.Verdict.FAIL
    leg.detail = verdict.detail


async def verify_best_of(
    plan: CallPlan, leg: Leg, completion: upstream.Completion, min_votes: int = 1
) -> upstream.Completion:
    """The first of the answers that passes verification, else the first answer, marked failed.

    ``min_votes`` > 1 (the backend's): the leg passes only when that many passing answers agree
    (routing/call/votes.py), and serves the first of them; when none do it serves the first answer of the
    largest passing group (else the first answer), marked failed."""
    if min_votes > 1:
        return await _verify_votes(plan, leg, completion, min_votes)
    verify_ms, first_failure, total = 0.0, "", len(completion.choices)
    judged_failing = False
    for index, (message, _) in enumerate(completion.choices):
        await verify(plan, leg, message)
        verify_ms += leg.verify_ms
        if leg.verdict == Invocation.Verdict.PASS:
            leg.verify_ms = verify_ms
            leg.detail = f"best of {total}: answer {index + 1} passed. {leg.detail}".strip()
            return completion.pick(index)
        judged_failing = judged_failing or leg.verdict == Invocation.Verdict.FAIL
        first_failure = first_failure or leg.detail
    leg.verify_ms = verify_ms
    leg.verdict = Invocation.Verdict.FAIL if judged_failing else Invocation.Verdict.ERROR  # none was judged
    leg.detail = f"best of {total}: no answer passed; the first failed: {first_failure}"
    return completion.pick(0)


async def _verify_votes(
    plan: CallPlan, leg: Leg, completion: upstream.Completion, min_votes: int
) -> upstream.Completion:
    verify_ms, first_failure, total = 0.0, "", len(completion.choices)
    groups: dict[str, list[int]] = {}
    failed = 0
    for index, (message, _) in enumerate(completion.choices):
        await verify(plan, leg, message)
        verify_ms += leg.verify_ms
        if leg.verdict != Invocation.Verdict.PASS:
            failed += 1
            first_failure = first_failure or leg.detail
            continue
        group = groups.setdefault(answer_key(message), [])
        group.append(index)
        if len(group) == min_votes:  # enough agree: the rest need not be read
            leg.verify_ms = verify_ms
            agreeing = ", ".join(str(i + 1) for i in group)
            leg.detail = f"best of {total}, {min_votes} must agree: answers {agreeing} passed and agree."
            return completion.pick(group[0])
    leg.verify_ms = verify_ms
    leg.verdict = Invocation.Verdict.FAIL
    largest = max(groups.values(), key=len, default=[])
    leg.detail = (
        f"best of {total}, {min_votes} must agree: {total - failed} passed, at most {len(largest)} agree"
        + (f"; the first failure: {first_failure}" if first_failure else "")
    )
    return completion.pick(largest[0] if largest else 0)


async def verify_choices(
    plan: CallPlan, leg: Leg, completion: upstream.Completion, wanted: int
) -> upstream.Completion:
    """A call asking for ``n`` > 1 choices: every answer verified, and the completion answering with
    ``wanted`` of them, those that passed first (in order), then those that failed. The leg passes
    only when every choice served passed (and there are ``wanted`` of them), so the gateway falls
    back to the teacher, with the same n, unless all of the student's choices pass.

    All or nothing, rather than serving the student's passing choices filled up from the teacher: the
    n choices of a completion are alternatives of equal standing (a caller may take any one, compare
    them, or vote), so none may be one the verifier refused while a passing one could be had; and a
    completion names one ``model``, and the ledger one server, which a mix of two would make untrue.
    The teacher's n answers were held in the budget from the start, so falling back never overspends.
    The leg's detail names every choice's verdict. A best-of-n backend (``samples`` > 1) is asked for
    ``wanted`` x ``samples`` answers, from which the same rule picks."""
    answers = completion.choices
    verdicts: list[tuple[bool, str]] = []
    verify_ms, judged_failing, unjudged = 0.0, False, False
    for message, _ in answers:
        if plan.verifier is None:
            verdicts.append((True, ""))
            continue
        await verify(plan, leg, message)
        verify_ms += leg.verify_ms
        judged_failing = judged_failing or leg.verdict == Invocation.Verdict.FAIL
        unjudged = unjudged or leg.verdict == Invocation.Verdict.ERROR
        verdicts.append((leg.verdict == Invocation.Verdict.PASS, leg.detail))
        if sum(passed for passed, _ in verdicts) == wanted:
            break  # enough passing choices: the rest are not needed
    passing = [i for i, (passed, _) in enumerate(verdicts) if passed][:wanted]
    failing = [i for i, (passed, _) in enumerate(verdicts) if not passed]
    chosen = passing + failing[: wanted - len(passing)]
    if plan.verifier is None:
        return replace(completion, choices=[answers[i] for i in chosen])
    leg.verify_ms = verify_ms
    served_passed = len(passing) == wanted
    if served_passed:
        leg.verdict = Invocation.Verdict.PASS
    else:  # error when no choice was judged a failure, some only left unjudged (routing/verifiers/pool.py)
        leg.verdict = Invocation.Verdict.ERROR if unjudged and not judged_failing else Invocation.Verdict.FAIL
    notes = [
        f"answer {i + 1} {'passed' if passed else 'failed'}{f': {detail}' if detail else ''}"
        for i, (passed, detail) in enumerate(verdicts)
    ]
    shortfall = "" if len(chosen) == wanted else f" (only {len(chosen)} answers came back)"
    summary = f"n={wanted}: {len(passing)} of {len(verdicts)} verified answers passed{shortfall}"
    leg.detail = f"{summary}; served {', '.join(str(i + 1) for i in chosen)}. " + "; ".join(notes)
    served = [answers[i] for i in chosen]
    return replace(completion, message=served[0][0], finish_reason=served[0][1], choices=served)


async def run_leg(
    plan: CallPlan, record: CallRecord, backend: Backend, *, extend: Extend | None = None
) -> upstream.Completion | None:
    """One whole (not streamed) leg on ``backend``, appended to ``record``; None when it failed (its
    attempts that may have been billed still charged). ``extend``: holds more for a retry."""
    leg = new_leg(backend)
    record.legs.append(leg)
    body, samples = plan.leg_body(backend), plan.samples(backend)
    wanted = plan.request.choice_count
    if wanted > 1:
        body["n"] = wanted * samples  # a best-of-n backend: samples answers for each choice
    pricing = plan.pricing(backend, body)  # the hold's, unless the body asks for n answers
    attempts = leg_attempts(pricing, max_tokens=plan.max_tokens, answers=wanted * samples, extend=extend)
    try:
        completion = await upstream.complete(backend, body, attempts=attempts)
    except UpstreamError as exc:
        leg.error, leg.error_status = exc.message, exc.status
        leg.verdict = Invocation.Verdict.ERROR
        charge_attempts(leg, attempts)
        return None
    leg.latency_ms = completion.latency_ms
    if not isinstance(completion.raw.get("usage"), dict):  # answered, and billed, but no usage said
        # Charged its worst case; the tokens are counted here from what was sent and received.
        leg.prompt_tokens = pricing.prompt_tokens
        leg.completion_tokens = sum(completion_token_bound(_answer_text(m)) for m, _ in completion.choices)
        charge_bound(leg, attempts)
    else:
        price_leg(leg, pricing, completion.usage, attempts=attempts)
    if wanted > 1:
        return await verify_choices(plan, leg, completion, wanted)
    if samples > 1 and (len(completion.choices) > 1 or backend.min_votes > 1):
        return await verify_best_of(plan, leg, completion, backend.min_votes)
    await verify(plan, leg, completion.message)
    return completion
