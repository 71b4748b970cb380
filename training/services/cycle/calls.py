"""What the cycle's steps share: the plan of a stored call, one upstream call, task signatures.

Calls are planned by routing's one call planner (``routing.call.plans``: backends, adapter, verifier,
SkillBook prefix, best-of-n, body) and go through the gateway's own upstream code (``routing.call.upstream``,
litellm) and verifiers, so a replayed call meets the same backend, prompt and checks as it did behind
``/v1/chat/completions``. What is here is the cycle's own: errors, settings, task signatures and the
held-out split (answers as training text and back: ``training/completions.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from core.errors import ServiceError
from routing.call import upstream
from routing.call.attempts import Attempts
from routing.call.legs import Extend
from routing.call.plans import CallPlan, plan_call
from routing.errors import UpstreamError
from routing.ledger import learning_spend
from routing.models import Backend, TaskProfile
from routing.pricing import prices_for, terms_of, usage_cost
from routing.verifiers import Verifier
from routing.verifiers.json_schema import message_text
from routing.verifiers.policy import VerifierPolicyError
from training import conf


class CycleError(ServiceError):
    """A step cannot run for a reason that retrying will not fix (no teacher, bad configuration)."""

    code = "cycle_step_failed"
    status = 409


def replay_plan(
    profile: TaskProfile,
    request: dict[str, Any],
    *,
    backends: Sequence[Backend] | None = None,
    adapter: str | None = None,
    skillbook_text: str | None = None,
) -> CallPlan | None:
    """The plan of a stored call (a ledger request or a demonstration's) as the gateway makes it. The
    call was admitted there, so the profile's per-call permission is not checked again; None when its
    verifier config cannot be built (nothing can judge a replay of it)."""
    try:
        return plan_call(
            profile=profile,
            request=request,
            enforce=False,
            backends=backends,
            adapter=adapter,
            skillbook_text=skillbook_text,
        )
    except VerifierPolicyError:
        return None


def required(backend: Backend | None, role: str) -> Backend:
    """A planned backend the step cannot do without."""
    if backend is None:
        raise CycleError(f"No {role} backend is configured.")
    return backend


@dataclass
class Answer:
    message: dict[str, Any]  # the first answer
    cost_usd: Decimal
    latency_ms: float
    choices: list[dict[str, Any]]  # every answer: more than one from a best-of-n backend


def attempts_for(backend: Backend, body: dict[str, Any], *, extend: Extend | None = None) -> Attempts:
    """The attempts of one learning call, billed as the gateway bills its legs (routing/call/attempts.py):
    each attempt that may have been billed without usage costs ``learning_spend.call_bound``, and a
    retry first holds one more (``extend``: ``learning_spend.extender`` of the call's reservation)."""
    return Attempts(bound_of=lambda: learning_spend.call_bound(backend, body), extend=extend)


async def acall(backend: Backend, body: dict[str, Any], *, attempts: Attempts | None = None) -> Answer:
    """One upstream call; its cost is its usage at the body's prices plus the worst case of every
    attempt billed without usage (read ``attempts.unmeasured_cost`` when it raises UpstreamError)."""
    attempts = attempts if attempts is not None else attempts_for(backend, body)
    completion = await upstream.complete(backend, body, attempts=attempts)
    choices = [message for message, _ in completion.choices] or [completion.message]
    if isinstance(completion.raw.get("usage"), dict):
        cost = usage_cost(prices_for(backend), completion.usage, terms_of(body))
    else:  # answered, so billed, but no usage said: its worst case
        attempts.billed_without_usage()
        cost = Decimal(0)
    return Answer(completion.message, cost + attempts.unmeasured_cost, completion.latency_ms, choices)


def call(backend: Backend, body: dict[str, Any], *, attempts: Attempts | None = None) -> Answer:
    """One upstream call, synchronously (Celery tasks are synchronous). Raises UpstreamError."""
    return asyncio.run(acall(backend, body, attempts=attempts))


def learning_call(backend: Backend, body: dict[str, Any], *, profile_id: int, purpose: str) -> Answer:
    """One upstream call of the cycle (:func:`call`), on the ledger under the learning key with its
    worst case held on that key's budget first, and each retry's too (routing/ledger/learning_spend.py);
    attempts that failed after the provider may have billed them are charged their worst case. Raises
    UpstreamError, and CycleError when the learning budget cannot hold the call."""
    try:
        reservation = learning_spend.reserve(learning_spend.call_bound(backend, body))
    except learning_spend.LearningBudgetSpent as exc:
        raise CycleError(exc.message) from None
    attempts = attempts_for(backend, body, extend=learning_spend.extender(reservation))
    spend = learning_spend.Spend(
        profile_id=profile_id,
        purpose=purpose,
        role=backend.role,
        backend=backend.name,
        model=backend.litellm_model,
        cost_usd=Decimal(0),
        request=body,
    )
    try:
        answer = call(backend, body, attempts=attempts)
    except UpstreamError as exc:
        failed = replace(spend, cost_usd=attempts.unmeasured_cost, error=exc.message)
        learning_spend.record(failed, reservation=reservation)
        raise
    learning_spend.record(replace(spend, cost_usd=answer.cost_usd), reservation=reservation)
    return answer


def verify(verifier: Verifier, request: dict[str, Any], message: dict[str, Any]) -> tuple[bool, str]:
    verdict = verifier.verify(request=request, message=message)
    return verdict.passed, verdict.detail


def first_passing(
    verifier: Verifier, request: dict[str, Any], answer: Answer
) -> tuple[dict[str, Any], bool, str]:
    """(answer, passed, detail): the first of the answers that passes, else the first one, failed."""
    first_detail = ""
    for message in answer.choices:
        passed, detail = verify(verifier, request, message)
        if passed:
            return message, True, detail
        first_detail = first_detail or detail
    return answer.choices[0], False, first_detail


_SPACE = re.compile(r"\s+")


def task_signature(request: dict[str, Any]) -> tuple[str, str]:
    """(signature, label) of a call: what kind of task it is within its profile.

    Calls share a signature when they share the system prompt, the declared tools, the response format
    and the verifier kind, so one SkillBook section serves all calls of one kind (every HumanEval
    completion, every extraction with the same instructions) rather than one call.
    """
    messages = request.get("messages") or []
    system = next((m for m in messages if m.get("role") in ("system", "developer")), None)
    system_text = _SPACE.sub(" ", message_text(system)).strip()[:500] if system else ""
    tools = sorted(
        str((t.get("function") or {}).get("name")) for t in request.get("tools") or [] if isinstance(t, dict)
    )
    response_format = (request.get("response_format") or {}).get("type", "")
    kind = ((request.get("metadata") or {}).get("verifier") or {}).get("kind", "")
    key = json.dumps([system_text, tools, response_format, kind], ensure_ascii=False)
    signature = hashlib.sha256(key.encode()).hexdigest()[:16]
    if tools:
        label = "tools: " + ", ".join(tools)
    elif system_text:
        label = system_text
    else:
        first_user: dict[str, Any] = next((m for m in messages if m.get("role") == "user"), {})
        label = _SPACE.sub(" ", message_text(first_user)).strip()
    return signature, label[:80]


def split_of(messages: list[dict[str, Any]]) -> str:
    """train or heldout, fixed by the prompt: one shard in HELDOUT_SHARDS is held out for admission,
    so a teacher pair and a self-repair pair of the same prompt always land on the same side."""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).digest()
    shards = conf.get().cycle.heldout_shards
    return "heldout" if shards > 0 and int.from_bytes(digest[:4], "big") % shards == 0 else "train"


__all__ = [
    "Answer",
    "CycleError",
    "acall",
    "attempts_for",
    "call",
    "first_passing",
    "learning_call",
    "replay_plan",
    "required",
    "split_of",
    "task_signature",
    "verify",
]
