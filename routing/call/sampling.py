"""Background sampling of the leg a call did not run, so the ledger labels what the router decided.

- A call routed to the student that passed (or stood unverified) gets, with probability
  ``teacher_sample_rate``, the teacher run on the same request in the background: its verdict,
  and, where the two answers can be compared, whether the student's answer was actually correct.
- A call routed to the teacher up front gets, with probability ``student_sample_rate``, the student
  (cheap): whether it would have passed, the label of the calls the router keeps away from it.

The draw is made as the call starts (no database read); the leg runs in the Celery task
``routing.tasks.sample_leg`` taking the invocation id, which claims the row with a conditional
UPDATE (queued -> running) and appends the leg marked ``"background": true`` to ``Invocation.legs``,
where replay export finds it (``record_from_invocation``).

Cost bound: a ``SampleSpend`` row per profile and UTC day. Before a sampled leg runs, its worst
case (prompt bytes x input price + max_tokens x output price) is added with one conditional UPDATE
``spent + bound <= cap``; a retry after an attempt the provider may have billed adds one more worst case
first, on the cap and on the learning key (no room: no retry); afterwards the difference to the actual
cost, every billed attempt included (routing/call/attempts.py), is given back. The day's
sampled spend therefore never exceeds the cap, however many workers run. The client's key is not
charged for sampled legs: they are the operator's cost of learning, on the ledger as a row of their own
under the learning key (routing/ledger/learning_spend.py), whose budget holds the same worst case first.

Correctness from the comparison (``routing/router/learning/labels.py``, a comparator per answer
shape): tool calls by name and arguments, JSON after normalisation, free text only when identical;
equal -> the student's answer is correct; different, with the teacher's answer passing its verifier
(or none) -> the student's is wrong (the teacher is the reference). The student's leg gets
``correct`` and ``correct_by`` ("sample:<comparator>"). Anything else stays unknown (``correct``
absent), and unknown never counts as passed: not in training, calibration, admission or drift.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core import jobs, jobs_conf
from core.conf import resolve
from routing import conf
from routing.budgets import Hold
from routing.call import judging
from routing.call.legs import run_leg
from routing.call.plans import plan_call
from routing.call.sample_spend import spend_extend, spend_reserve, spend_settle
from routing.errors import UpstreamError
from routing.ledger import CallRecord, has_body, learning_spend, stores_bodies
from routing.ledger.writer import record_call
from routing.models import Invocation, RouterVersion, TaskProfile
from routing.pricing import PricingError, cost_bound
from routing.router.learning import labels
from routing.router.versions.config import labelling
from routing.router.versions.drift import is_suspected
from routing.router.versions.truth import fixed_choice
from routing.verifiers.policy import VerifierPolicyError

TEACHER, STUDENT = Invocation.Route.TEACHER, Invocation.Route.STUDENT
ANSWERED = (Invocation.Verdict.PASS, Invocation.Verdict.UNVERIFIED)


_NO_SAMPLES = {"teacher_sample_rate": 0.0, "student_sample_rate": 0.0}


def rates(profile: TaskProfile) -> tuple[float, float]:
    """(teacher_sample_rate, student_sample_rate) of a profile: its policy_params, else for a
    learned profile the router settings; other profiles sample only when they say so (a layer of
    zeros under their own values, ``core.conf.resolve``)."""
    router, params = conf.get().router, profile.policy_params or {}
    unlearned = None if profile.policy == TaskProfile.Policy.LEARNED else _NO_SAMPLES
    return (
        resolve(router, "teacher_sample_rate", params, unlearned),
        resolve(router, "student_sample_rate", params, unlearned),
    )


def boosted(profile: TaskProfile, boost: float, policy: str = "") -> tuple[float, float]:
    """``rates(profile)`` times ``boost`` (the decision's: drift suspected, too few labels), at most 1.
    Where a fixed ``policy`` serves a learned profile while labels are wanted (boost above 1: its version
    flagged, held or stopped, or too few labels to measure the fallback), the student's leg is drawn at
    least at ``LABELS_WANTED_STUDENT_RATE``: the student costs a fraction of the teacher, and its answers
    on the calls the teacher serves are what re-measures the version and admits a retrain. The rate
    drawn is the rate recorded (``_sample`` calls this with the same boost and policy)."""
    teacher_rate, student_rate = rates(profile)
    teacher_rate, student_rate = min(1.0, teacher_rate * boost), min(1.0, student_rate * boost)
    fixed = profile.policy == TaskProfile.Policy.LEARNED and policy not in ("", TaskProfile.Policy.LEARNED)
    if boost > 1.0 and fixed and student_rate > 0:
        student_rate = max(student_rate, labelling(profile).wanted_student_rate)
    return teacher_rate, student_rate


def draw(*, profile: TaskProfile, route: str, policy: str, has_student: bool, boost: float = 1.0) -> str:
    """The leg a background sample would add to this call, or ''. Forced calls are never sampled.
    ``boost``: the routing decision's sample boost (``Decision.sample_boost``)."""
    if policy == "forced" or not has_student:
        return ""
    teacher_rate, student_rate = boosted(profile, boost, policy)
    rate = teacher_rate if route == STUDENT else student_rate
    if rate > 0 and random.random() < rate:
        return TEACHER if route == STUDENT else STUDENT
    return ""


def sample_boost(inv: Invocation) -> float:
    """The boost the call was sampled under, as it stands now (the rate a sampled leg records, so that
    the leg is weighted by the rate it was drawn at): drift suspected on its router version; or a
    learned profile with no version whose fallback too few labels measure, or whose drift watch leans
    towards drift (``FixedChoice.sample_more``, ``Learned._fallback``)."""
    if inv.router_version_id is not None:
        found = RouterVersion.objects.filter(pk=inv.router_version_id).values_list(
            "drift_flag", "drift_reason"
        )
        suspected = any(is_suspected(flag, reason) for flag, reason in found)
        return labelling(inv.profile).boost if suspected else 1.0
    fallbacks = (TaskProfile.Policy.ALWAYS_TEACHER, TaskProfile.Policy.STUDENT_WITH_FALLBACK)
    if inv.profile.policy == TaskProfile.Policy.LEARNED and inv.policy in fallbacks:
        choice = fixed_choice(inv.profile)  # the fallback that served it, raising sampling now
        return labelling(inv.profile).boost if choice.sample_more and choice.policy == inv.policy else 1.0
    return 1.0


def eligible(record: CallRecord) -> bool:
    if record.status_code != 200 or not record.sample_leg:
        return False
    if not stores_bodies():  # the sample replays the stored request: a hash-only row has none
        return False
    if record.sample_leg == TEACHER:
        return record.route == STUDENT and record.served_by == STUDENT and record.verdict in ANSWERED
    return record.route == TEACHER and record.served_by == TEACHER


def record_and_sample(*, record: CallRecord, hold: Hold | None) -> None:
    """The gateway's ledger write; a sampled call is marked queued in the same row, and the ledger
    writer enqueues its background leg (``routing.tasks.sample_leg``) once the row is committed, be it
    at once (LEDGER_WRITER "sync"), in a group commit ("batched") or by a journal's replay."""
    if eligible(record):
        record.sample_state = Invocation.SampleState.QUEUED
    record_call(record=record, hold=hold)


# --- the daily cap ------------------------------------------------------------------------------


# --- comparing answers --------------------------------------------------------------------------


def student_correct(
    student: dict[str, Any] | None, teacher: dict[str, Any] | None, teacher_ok: bool
) -> bool | None:
    """Whether the student's answer was correct, judged against the teacher's; None: unknown
    (``routing.router.learning.labels.compare``, which also names the comparator that decided)."""
    return labels.compare(student, teacher, teacher_ok).correct


# --- the background leg -------------------------------------------------------------------------


SAMPLE_JOB = jobs.JobSpec(
    Invocation,
    queued=Invocation.SampleState.QUEUED,
    running=Invocation.SampleState.RUNNING,
    state="sample_state",
    attempts="sample_attempts",
    heartbeat="sample_heartbeat_at",
)


def _finish(inv: Invocation, state: str) -> str:
    jobs.still_ours(SAMPLE_JOB, inv.pk, inv.sample_attempts).update(sample_state=state)
    return state


def samples_sweep(*, enqueue: Callable[[Any], None]) -> jobs.SweepReport:
    """Beat: samples whose message was lost are sent again; samples whose worker died are requeued
    (``SKILLGATE_JOBS_MAX_ATTEMPTS`` claims at most), then failed. A dead worker's reservation on the
    day's ``SampleSpend`` stays spent (its worst case): the cap errs on the safe side. ``enqueue`` sends
    one sample's task (routing/tasks.py)."""

    def give_up(rows: QuerySet[Invocation], pk: Any, reason: str) -> bool:
        return bool(rows.update(sample_state=Invocation.SampleState.FAILED))

    return jobs.sweep(
        SAMPLE_JOB,
        **jobs_conf.get().sweep_timings(),
        enqueue=enqueue,
        give_up=give_up,
    )


def sample_run(*, invocation_id: uuid.UUID | str) -> str:
    """Runs the sampled leg of one queued call; returns the final sample state. Idempotent: only
    a queued row is claimed (``core/jobs.py``), so a redelivered task does nothing; a heartbeat is
    written while the leg runs, so the sweeper can tell a dead worker from a slow upstream."""
    attempt = jobs.claim(SAMPLE_JOB, invocation_id)
    if attempt is None:
        return "not queued"
    with jobs.heartbeat(SAMPLE_JOB, invocation_id, attempt, every_s=jobs_conf.get().heartbeat_s):
        return _sample(invocation_id)


def _sample(invocation_id: uuid.UUID | str) -> str:
    inv = Invocation.objects.select_related("api_key", "profile__teacher", "profile__student").get(
        pk=invocation_id
    )
    if not has_body(inv.request):  # purged, or written in hash-only mode
        return _finish(inv, Invocation.SampleState.FAILED)
    profile = inv.profile
    role = TEACHER if inv.served_by == STUDENT else STUDENT
    try:
        # Planned as the gateway plans a call (routing/call/plans.py): the student with its admitted adapter.
        plan = plan_call(profile=profile, request=inv.request, api_key=inv.api_key)
    except (VerifierPolicyError, ValueError):
        return _finish(inv, Invocation.SampleState.FAILED)
    backend = plan.teacher if role == TEACHER else plan.student
    if backend is None or plan.teacher is None:
        return _finish(inv, Invocation.SampleState.FAILED)
    try:
        pricing = plan.pricing(backend)  # read once: the leg (run_leg) reads the same
    except PricingError:
        return _finish(inv, Invocation.SampleState.FAILED)
    bound = cost_bound(pricing.prices, prompt_tokens=pricing.prompt_tokens, max_tokens=plan.max_tokens)
    cap = resolve(conf.get().router, "sample_daily_usd", profile.policy_params or {})
    day = timezone.now().date()
    if not spend_reserve(profile_id=profile.pk, day=day, amount=bound, cap=cap):
        return _finish(inv, Invocation.SampleState.CAPPED)
    try:  # the learning key's budget holds it too: the sample goes on the ledger under that key
        reservation = learning_spend.reserve(bound)
    except learning_spend.LearningBudgetSpent:
        spend_settle(profile_id=profile.pk, day=day, reserved=bound, actual=Decimal(0))
        return _finish(inv, Invocation.SampleState.CAPPED)
    scratch = CallRecord(
        id=inv.pk,
        api_key_id=inv.api_key_id,
        profile_id=profile.pk,
        requested_model=inv.requested_model,
        route=role,
        policy="sample",
        score=None,
        stream=False,
        request=inv.request,
    )
    held = [bound]  # what the day's cap holds for this sample: a retry first holds one more attempt

    def more(amount: Decimal) -> bool:
        if not spend_extend(profile_id=profile.pk, day=day, amount=amount, cap=cap):
            return False
        if not learning_spend.extend(reservation, amount):
            spend_settle(profile_id=profile.pk, day=day, reserved=amount, actual=Decimal(0))
            return False
        held.append(amount)
        return True

    actual: Decimal | None = None
    completion = None
    try:  # every attempt the provider may bill is charged (run_leg), and a retry is held first
        completion = asyncio.run(run_leg(plan, scratch, backend, extend=sync_to_async(more)))
        actual = scratch.legs[-1].cost_usd
    except UpstreamError:
        pass
    finally:
        reserved = sum(held, Decimal(0))
        actual = reserved if actual is None else actual  # one that blew up keeps its worst case
        spend_settle(profile_id=profile.pk, day=day, reserved=reserved, actual=actual)
        sampled = learning_spend.Spend(
            profile_id=profile.pk,
            purpose="sample",
            role=role,
            backend=backend.name,
            model=backend.litellm_model,
            cost_usd=actual,
            request=inv.request,
            error=(scratch.legs[-1].error if scratch.legs else "") or ("" if completion else "no answer"),
        )
        learning_spend.record(sampled, reservation=reservation)
    leg = scratch.legs[-1].as_json() if scratch.legs else None
    if leg is None:
        return _finish(inv, Invocation.SampleState.FAILED)
    teacher_rate, student_rate = boosted(profile, sample_boost(inv), inv.policy)
    leg.update(background=True, sample_rate=teacher_rate if role == TEACHER else student_rate)
    sampled_message = completion.message if completion is not None else None
    # Prose that no comparator labels: the teacher judges the pair, before the row is locked.
    judged = judging.judge_sample(inv, role=role, leg=leg, sampled=sampled_message)
    with transaction.atomic():
        row = Invocation.objects.select_for_update().get(pk=inv.pk)
        legs = [dict(item) for item in row.legs or []]
        served = (row.response or {}).get("message")
        if role == TEACHER:
            student_leg = next((item for item in legs if item.get("role") == STUDENT), None)
            teacher_ok = leg.get("verdict") in ANSWERED
            label = labels.compare(served, sampled_message, teacher_ok) if completion else labels.UNKNOWN
        else:
            student_leg = leg
            teacher_leg = next((item for item in reversed(legs) if item.get("role") == TEACHER), None)
            teacher_ok = teacher_leg is not None and teacher_leg.get("verdict") in ANSWERED
            label = labels.compare(sampled_message, served, teacher_ok) if completion else labels.UNKNOWN
        label = label if label.known else judged
        if student_leg is not None and label.known:
            student_leg["correct"] = label.correct
            student_leg["correct_by"] = f"sample:{label.source}"
        legs.append(leg)
        if not jobs.still_ours(SAMPLE_JOB, row.pk, inv.sample_attempts).update(
            legs=legs, sample_state=Invocation.SampleState.DONE
        ):
            return "given up"  # the sweeper took this attempt over meanwhile; its decision stands
    return Invocation.SampleState.DONE
