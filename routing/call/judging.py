"""Asking the free-text judge: the profile's teacher, both orders, through the gateway's call path.

``routing.router.learning.judge`` builds the two questions and reads the replies; here each question
is planned by the one call planner (``routing.call.plans``, the profile's teacher, no verifier: the
judge's one word is not the profile's answer) and run as a leg (``routing.call.legs.run_leg``). Each
is a learning call: its worst case is held on the profile's daily sample cap (``SampleSpend``, as the
sample it completes) and on the learning key's budget, and it is written to the ledger under the
learning key with purpose ``judge`` (``routing.ledger.learning_spend``). No room left under either:
no question is asked, and the answer stays unknown.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from decimal import Decimal
from typing import Any

from django.utils import timezone

from core.conf import resolve
from routing import conf
from routing.call.legs import run_leg
from routing.call.plans import plan_call
from routing.call.sample_spend import spend_reserve, spend_settle
from routing.errors import UpstreamError
from routing.ledger import CallRecord, learning_spend
from routing.models import Invocation, TaskProfile
from routing.pricing import PricingError
from routing.router.learning import judge
from routing.router.learning.labels import UNKNOWN, Label, compare
from routing.verifiers.policy import VerifierPolicyError

PURPOSE = "judge"


def _ask(profile: TaskProfile, body: dict[str, Any], api_key_id: int) -> str | None:
    """One question to the teacher; its one-word verdict, or None (no answer, no room, no verdict)."""
    try:
        plan = replace(plan_call(profile=profile, request=body, enforce=False), verifier=None)
    except (VerifierPolicyError, ValueError):
        return None
    teacher = plan.teacher
    if teacher is None:
        return None
    try:
        bound = learning_spend.call_bound(teacher, plan.leg_body(teacher))
    except PricingError:
        return None
    cap = resolve(conf.get().router, "sample_daily_usd", profile.policy_params or {})
    day = timezone.now().date()
    if not spend_reserve(profile_id=profile.pk, day=day, amount=bound, cap=cap):
        return None
    try:
        held = learning_spend.reserve(bound)
    except learning_spend.LearningBudgetSpent:
        spend_settle(profile_id=profile.pk, day=day, reserved=bound, actual=Decimal(0))
        return None
    scratch = CallRecord(
        id=uuid.uuid4(),
        api_key_id=api_key_id,
        profile_id=profile.pk,
        requested_model=f"learning:{PURPOSE}",
        route=Invocation.Route.TEACHER,
        policy=PURPOSE,
        score=None,
        stream=False,
        request=body,
    )
    actual, completion = bound, None
    try:
        completion = asyncio.run(run_leg(plan, scratch, teacher))
        actual = scratch.legs[-1].cost_usd
    except UpstreamError:
        completion = None
    finally:
        spend_settle(profile_id=profile.pk, day=day, reserved=bound, actual=actual)
        error = (scratch.legs[-1].error if scratch.legs else "") or ("" if completion else "no answer")
        spend = learning_spend.Spend(
            profile_id=profile.pk,
            purpose=PURPOSE,
            role=teacher.role,
            backend=teacher.name,
            model=teacher.litellm_model,
            cost_usd=actual,
            request=body,
            error=error,
        )
        learning_spend.record(spend, reservation=held)
    return judge.reply_verdict(completion.message) if completion is not None else None


def judge_answers(
    *,
    profile: TaskProfile,
    request: dict[str, Any],
    student: dict[str, Any],
    teacher: dict[str, Any],
    teacher_ok: bool,
    api_key_id: int,
) -> Label:
    """The student's prose answer judged by the teacher in both orders (``judge.combine``); unknown
    when the orders disagree, a reply is no verdict, or a question could not be asked. The second
    question is not asked when the first gave no verdict."""
    first_q, second_q = judge.questions(request, student, teacher)
    first = _ask(profile, first_q, api_key_id)
    if first is None:
        return UNKNOWN
    second = _ask(profile, second_q, api_key_id)
    return judge.combine(first, second, teacher_ok=teacher_ok)


def judge_sample(inv: Invocation, *, role: str, leg: dict[str, Any], sampled: dict[str, Any] | None) -> Label:
    """The judge's label for a background sample's pair (``routing.call.sampling``), asked only where
    no comparator labels it and both answers are prose; else unknown (the comparator's label stands).
    ``role``: the sampled leg's role; ``leg``: the sampled leg; ``sampled``: its answer."""
    answered = (Invocation.Verdict.PASS, Invocation.Verdict.UNVERIFIED)
    served = (inv.response or {}).get("message")
    if not isinstance(served, dict) or not isinstance(sampled, dict) or inv.profile is None:
        return UNKNOWN
    if role == Invocation.Route.TEACHER:
        student, teacher, teacher_ok = served, sampled, leg.get("verdict") in answered
    else:
        legs = [item for item in inv.legs or [] if isinstance(item, dict)]
        teacher_leg = next(
            (item for item in reversed(legs) if item.get("role") == Invocation.Route.TEACHER), None
        )
        student, teacher = sampled, served
        teacher_ok = teacher_leg is not None and teacher_leg.get("verdict") in answered
    if not judge.judgeable(student, teacher, compare(student, teacher, teacher_ok)):
        return UNKNOWN
    return judge_answers(
        profile=inv.profile,
        request=inv.request or {},
        student=student,
        teacher=teacher,
        teacher_ok=teacher_ok,
        api_key_id=inv.api_key_id,
    )
