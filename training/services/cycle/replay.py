"""Replay: failed student calls become verified demonstrations.

Failed means the student's answer failed the verifier, or passed it and a background teacher sample
found it wrong (a weak verifier's false pass, routing/call/sampling.py); the latter get no
self-repair pair, since the verifier that passed the wrong answer cannot judge a retry.

For every call of a profile whose student answer failed verification, the teacher answers the same
request (the fallback answer the ledger already holds is reused when it passed: it is the teacher's
answer to the same request, already paid for) and the student tries once more by itself. An answer
becomes a :class:`Demonstration` only when it passes the call's verifier; a failing one is rejected
and counted. Every outcome is remembered per (call, source), so replaying again adds nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from routing.call.plans import CallPlan
from routing.errors import UpstreamError
from routing.models import Invocation, TaskProfile
from training import conf, selectors
from training.completions import completion_text
from training.models import Demonstration, ReplayAttempt
from training.services.cycle.calls import (
    first_passing,
    learning_call,
    replay_plan,
    required,
    split_of,
    task_signature,
    verify,
)

log = logging.getLogger(__name__)

Source = Demonstration.Source


@dataclass
class ReplayResult:
    calls: int = 0
    accepted: dict[str, int] = field(default_factory=lambda: {Source.TEACHER: 0, Source.SELF_REPAIR: 0})
    rejected: dict[str, int] = field(default_factory=lambda: {Source.TEACHER: 0, Source.SELF_REPAIR: 0})
    unverifiable: int = 0
    errors: int = 0
    demonstration_ids: list[int] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "accepted": dict(self.accepted),
            "rejected": dict(self.rejected),
            "unverifiable": self.unverifiable,
            "errors": self.errors,
            "demonstrations": len(self.demonstration_ids),
        }


def _served_teacher_answer(invocation: Invocation) -> dict[str, Any] | None:
    """The teacher's fallback answer from the ledger, when it passed verification."""
    if invocation.served_by != Invocation.Route.TEACHER or invocation.verdict != Invocation.Verdict.PASS:
        return None
    message = (invocation.response or {}).get("message")
    return message if isinstance(message, dict) else None


@transaction.atomic
def _record(
    *,
    invocation: Invocation,
    source: str,
    outcome: str,
    detail: str,
    message: dict[str, Any] | None = None,
    plan: CallPlan | None = None,
) -> Demonstration | None:
    ReplayAttempt.objects.get_or_create(
        invocation=invocation,
        source=source,
        defaults={"profile_id": invocation.profile_id, "outcome": outcome, "detail": detail[:4000]},
    )
    if outcome != ReplayAttempt.Outcome.ACCEPTED or message is None or plan is None:
        return None
    request = invocation.request
    signature, _ = task_signature(request)
    demonstration, _ = Demonstration.objects.get_or_create(
        invocation=invocation,
        source=source,
        defaults={
            "profile_id": invocation.profile_id,
            "messages": request["messages"],
            "request": request,
            "completion": completion_text(message),
            "verdict": {
                "passed": True,
                "detail": detail[:1000],
                "message": message,
                "verifier": plan.verifier_config,
            },
            "task_signature": signature,
            "split": split_of(request["messages"]),
        },
    )
    return demonstration


def _replay_teacher(plan: CallPlan | None, invocation: Invocation, result: ReplayResult) -> None:
    if plan is None or plan.verifier is None:
        _record(
            invocation=invocation,
            source=Source.TEACHER,
            outcome=ReplayAttempt.Outcome.UNVERIFIABLE,
            detail="",
        )
        result.unverifiable += 1
        return
    message = _served_teacher_answer(invocation)
    if message is None:
        teacher = required(plan.teacher, "teacher")
        body = plan.leg_body(teacher)  # best-of-n for a sampling teacher
        answer = learning_call(teacher, body, profile_id=invocation.profile_id, purpose="replay")
        message, passed, detail = first_passing(plan.verifier, invocation.request, answer)
    else:
        passed, detail = verify(plan.verifier, invocation.request, message)
    outcome = ReplayAttempt.Outcome.ACCEPTED if passed else ReplayAttempt.Outcome.REJECTED
    demonstration = _record(
        invocation=invocation,
        source=Source.TEACHER,
        outcome=outcome,
        detail=detail,
        message=message,
        plan=plan,
    )
    if demonstration is None:
        result.rejected[Source.TEACHER] += 1
    else:
        result.accepted[Source.TEACHER] += 1
        result.demonstration_ids.append(demonstration.pk)


def _replay_student(plan: CallPlan | None, invocation: Invocation, result: ReplayResult) -> None:
    """The student's own retry (its admitted adapter, the SkillBook in front), sampled; the first
    passing one is a self-repair pair."""
    if plan is None or plan.verifier is None:
        _record(
            invocation=invocation,
            source=Source.SELF_REPAIR,
            outcome=ReplayAttempt.Outcome.UNVERIFIABLE,
            detail="",
        )
        return
    if not selectors.student_failed_verifier(invocation):
        # The verifier passed the student's wrong answer: a retry it passes proves nothing.
        _record(
            invocation=invocation,
            source=Source.SELF_REPAIR,
            outcome=ReplayAttempt.Outcome.UNVERIFIABLE,
            detail="the verifier passed the student's wrong answer; it cannot judge a retry",
        )
        return
    student = required(plan.student, "student")
    body = plan.body_for(student, temperature=conf.get().cycle.self_repair_temperature)
    detail = "no retry"
    for _ in range(conf.get().cycle.self_repair_tries):
        message = learning_call(
            student, body, profile_id=invocation.profile_id, purpose="self_repair"
        ).message
        passed, detail = verify(plan.verifier, invocation.request, message)
        if passed:
            demonstration = _record(
                invocation=invocation,
                source=Source.SELF_REPAIR,
                outcome=ReplayAttempt.Outcome.ACCEPTED,
                detail=detail,
                message=message,
                plan=plan,
            )
            assert demonstration is not None
            result.accepted[Source.SELF_REPAIR] += 1
            result.demonstration_ids.append(demonstration.pk)
            return
    _record(
        invocation=invocation,
        source=Source.SELF_REPAIR,
        outcome=ReplayAttempt.Outcome.REJECTED,
        detail=detail,
    )
    result.rejected[Source.SELF_REPAIR] += 1


def demonstrations_replay(*, profile_id: int, invocation_ids: list[str] | None = None) -> ReplayResult:
    """Replays the profile's failed student calls not replayed yet (or only ``invocation_ids``).

    A backend that fails (down, timed out) leaves that call unrecorded for the next replay; it is
    counted in ``errors``. Not atomic as a whole: each call's outcome is committed as it is decided.
    """
    profile = TaskProfile.objects.select_related("teacher", "student").get(pk=profile_id)
    self_repair = conf.get().cycle.self_repair_tries > 0
    calls = selectors.failed_student_calls(
        profile_id=profile_id,
        sources=2 if self_repair else 1,
        invocation_ids=invocation_ids,
        limit=conf.get().cycle.replay_limit,
    )
    result = ReplayResult()
    for invocation in calls:
        result.calls += 1
        done = set(ReplayAttempt.objects.filter(invocation=invocation).values_list("source", flat=True))
        steps = [(Source.TEACHER, _replay_teacher)]
        if self_repair:
            steps.append((Source.SELF_REPAIR, _replay_student))
        todo = [(source, step) for source, step in steps if source not in done]
        if not todo:
            continue
        plan = replay_plan(profile, invocation.request)  # as the gateway planned it: routing.call.plans
        for source, step in todo:
            try:
                step(plan, invocation, result)
            except UpstreamError as exc:
                log.warning("replay of %s on the %s failed: %s", invocation.pk, source, exc.message)
                result.errors += 1
    return result
