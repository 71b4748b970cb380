"""Admission: replay a held-out set with a candidate configuration and with the active one, compare.

Both sides run the deployed student-with-fallback policy through the real backends: the student (its
adapter, the SkillBook in front) answers, the verifier checks, and a failed answer falls back to the
teacher. The teacher sees neither adapter nor SkillBook, so its answer to an item is the same for both
sides and is asked once. A candidate is admitted only when

* it loses no more held-out items than it gains: ``b <= c``, where ``b`` counts the items only the
  active side passed and ``c`` those only the candidate passed (so an exact McNemar test at level
  ``alpha`` cannot find it worse either; a ``b > c`` candidate is refused whatever the p-value, and the
  reason says whether the loss is also significant);
* it improves something: its mean cost per call or its fallback rate is lower than the active
  configuration's, or it passes more held-out items (``c > b``; where answers are labelled, a wrong
  answer the weak verifier passes is served, so correctness is what a fallback rate cannot show); and
* for a joint candidate (a SkillBook and an adapter), each part alone is no worse than the active
  configuration (``b <= c`` for the adapter with the active SkillBook, and for the SkillBook with the
  active adapter), so one part cannot ride in on the other's gain.

A refused joint candidate is not the end: each part alone is then judged by the same rules (it was
replayed anyway), and the best part that passes them is admitted by itself, the other part left out.
Every replayed attempt is on the books (``calls.attempts_for``), failed and retried ones included.

Where the profile labels live answers with background teacher samples (``teacher_sample_rate`` > 0), a
weak verifier's pass is not trusted either: the teacher answers every held-out item, and a student answer
the verifier passed but the teacher's passing answer shows wrong (``student_correct``, the rule the live
labels use) counts as a failure with no fallback (live, the verifier would have served it). Then the
student pass rate, the figure auto-rollback compares live correctness with, is a correctness figure.

The held-out set is every distinct prompt of the profile in the held-out shard (``split_of``): held-out
demonstrations and held-out ledger calls, including those the student passed, so a candidate that breaks
what already worked is caught too. Nothing in it is ever trained on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import transaction

from core.money import money_display
from routing.call.legs import Extend
from routing.call.plans import CallPlan, active_backends
from routing.call.sampling import rates, student_correct
from routing.errors import UpstreamError
from routing.ledger import learning_spend
from routing.models import Backend, Invocation, TaskProfile
from routing.verifiers import Verifier
from training import conf
from training.models import Admission, Demonstration
from training.services.cycle import heldout_spend
from training.services.cycle.calls import (
    acall,
    attempts_for,
    first_passing,
    replay_plan,
    required,
    split_of,
)


@dataclass(frozen=True)
class Configuration:
    """What the student is: its adapter name ('' for the backend's own model) and its SkillBook text."""

    adapter: str
    skillbook_text: str


@dataclass
class Item:
    key: str
    request: dict[str, Any]
    plan: CallPlan  # the profile's own plan of the request (routing.call.plans): its verifier and teacher

    @property
    def verifier(self) -> Verifier:
        assert self.plan.verifier is not None  # only calls with a verifier are items
        return self.plan.verifier


@dataclass
class Leg:
    passed: bool
    cost: Decimal
    error: str = ""
    message: dict[str, Any] | None = None
    wrong: bool = False  # passed the verifier, and the teacher's answer labels it wrong


@dataclass
class SideMetrics:
    n: int = 0
    passed: int = 0
    student_passed: int = 0
    fallbacks: int = 0
    errors: int = 0
    wrong: int = 0
    cost: Decimal = Decimal(0)
    outcomes: list[bool] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        n = max(self.n, 1)
        return {
            "n": self.n,
            "pass_rate": self.passed / n,
            "student_pass_rate": self.student_passed / n,
            "fallback_rate": self.fallbacks / n,
            "cost_usd": float(self.cost / n),
            "student_errors": self.errors,
            "student_wrong": self.wrong,
        }


def heldout_items(
    *, profile: TaskProfile, limit: int, backends: Sequence[Backend] | None = None
) -> list[Item]:
    """Distinct held-out prompts of the profile that have a verifier, newest first."""
    seen: set[str] = set()
    items: list[Item] = []

    def add(request: dict[str, Any]) -> None:
        key = hashlib.sha256(json.dumps(request.get("messages"), sort_keys=True).encode()).hexdigest()
        if key in seen or len(items) >= limit:
            return
        plan = replay_plan(profile, request, backends=backends)
        if plan is not None and plan.verifier is not None:
            seen.add(key)
            items.append(Item(key, request, plan))

    for demonstration in Demonstration.objects.filter(
        profile=profile, split=Demonstration.Split.HELDOUT
    ).order_by("-created_at", "-pk"):
        add(demonstration.request or {"messages": demonstration.messages})
    for invocation in Invocation.objects.filter(profile=profile).order_by("-created_at")[: limit * 20]:
        if invocation.request.get("messages") and split_of(invocation.request["messages"]) == "heldout":
            add(invocation.request)
    return items


async def _leg(backend: Backend, body: dict[str, Any], item: Item, extend: Extend | None = None) -> Leg:
    """One backend's answer to an item as the gateway gets it; a failed one costs its billed attempts."""
    attempts = attempts_for(backend, body, extend=extend)
    try:
        answer = await acall(backend, body, attempts=attempts)
    except UpstreamError as exc:
        return Leg(False, attempts.unmeasured_cost, exc.message)
    message, passed, _ = await asyncio.to_thread(first_passing, item.verifier, item.request, answer)
    return Leg(passed, answer.cost_usd, message=message)


def _side_plans(
    profile: TaskProfile, items: list[Item], side: Configuration, backends: Sequence[Backend] | None
) -> list[CallPlan]:
    """Each item planned with ``side`` as the student: its adapter and its SkillBook text."""
    plans = []
    for item in items:
        plan = replay_plan(
            profile,
            item.request,
            backends=backends,
            adapter=side.adapter,
            skillbook_text=side.skillbook_text,
        )
        assert plan is not None  # the same verifier as the item's own plan
        required(plan.student, "student")
        plans.append(plan)
    return plans


async def _evaluate(
    items: list[Item], sides: list[list[CallPlan]], *, labelled: bool = False, extend: Extend | None = None
) -> tuple[list[list[Leg]], list[Leg | None]]:
    """Student legs per side (each item's plan on that side) and item, and the teacher leg per item
    (None where no side fell back). Runs in an event loop: no database access in here. Replays are
    greedy (temperature 0), except that a best-of-n backend samples its n answers.

    ``labelled``: the teacher answers every item, and a student answer the verifier passed is marked
    ``wrong`` where the teacher's passing answer shows it wrong, by the rule the live samples label
    calls with (``routing.call.sampling.student_correct``)."""
    limit = asyncio.Semaphore(conf.get().cycle.admission_concurrency)

    async def student_leg(plan: CallPlan, item: Item) -> Leg:
        student = required(plan.student, "student")
        async with limit:
            return await _leg(student, plan.leg_body(student, temperature=0), item, extend)

    async def teacher_leg(item: Item) -> Leg:
        teacher = required(item.plan.teacher, "teacher")
        async with limit:
            return await _leg(teacher, item.plan.leg_body(teacher, temperature=0), item, extend)

    students = [
        await asyncio.gather(*(student_leg(plan, item) for plan, item in zip(plans, items, strict=True)))
        for plans in sides
    ]
    need = [labelled or any(not legs[i].passed for legs in students) for i in range(len(items))]
    answered = await asyncio.gather(
        *(teacher_leg(item) for item, needed in zip(items, need, strict=True) if needed)
    )
    it = iter(answered)
    teachers = [next(it) if needed else None for needed in need]
    for legs in students if labelled else []:
        for leg, teacher in zip(legs, teachers, strict=True):
            known = leg.passed and teacher is not None and teacher.passed
            if known and student_correct(leg.message, teacher.message if teacher else None, True) is False:
                leg.passed, leg.wrong = False, True
    return [list(legs) for legs in students], teachers


def _metrics(students: list[Leg], teachers: list[Leg | None]) -> SideMetrics:
    side = SideMetrics()
    for student, teacher in zip(students, teachers, strict=True):
        side.n += 1
        side.cost += student.cost
        side.errors += bool(student.error)
        if student.wrong:  # the verifier passed it: served as it is (no fallback), and wrong
            side.wrong += 1
            side.outcomes.append(False)
            continue
        if student.passed:
            side.student_passed += 1
            side.outcomes.append(True)
            continue
        assert teacher is not None
        side.fallbacks += 1
        side.cost += teacher.cost
        side.outcomes.append(teacher.passed)
    side.passed = sum(side.outcomes)
    return side


def mcnemar(active: list[bool], candidate: list[bool]) -> tuple[int, int, float]:
    """(b, c, two-sided exact p): b = only the active side passed, c = only the candidate passed."""
    from scipy.stats import binomtest  # here: scipy.stats costs every process's start-up ~2 s

    b = sum(1 for a, c in zip(active, candidate, strict=True) if a and not c)
    c = sum(1 for a, c in zip(active, candidate, strict=True) if c and not a)
    p = float(binomtest(b, b + c, 0.5).pvalue) if b + c else 1.0
    return b, c, p


@dataclass(frozen=True)
class Part:
    """One part of a joint candidate judged alone against the active configuration."""

    name: str
    metrics: SideMetrics
    b: int
    c: int
    p: float

    def as_json(self) -> dict[str, Any]:
        return {**self.metrics.as_json(), "mcnemar_b": self.b, "mcnemar_c": self.c, "p_value": self.p}


def _worse(b: int, c: int, p: float, alpha: float) -> str:
    significance = f"p={p:.4f} < {alpha}, significant" if p < alpha else f"p={p:.4f}"
    return f"loses {b} held-out items and gains {c} (McNemar b={b}, c={c}, {significance})"


def decide(
    active: SideMetrics,
    candidate: SideMetrics,
    *,
    b: int,
    c: int,
    p: float,
    alpha: float,
    min_items: int,
    parts: Sequence[Part] = (),
) -> tuple[str, str]:
    if candidate.n < min_items:
        return Admission.Decision.REFUSED, f"only {candidate.n} held-out items; admission needs {min_items}"
    act, cand = active.as_json(), candidate.as_json()
    if b > c:
        return Admission.Decision.REFUSED, (
            f"pass rate worse: {cand['pass_rate']:.3f} vs {act['pass_rate']:.3f}; {_worse(b, c, p, alpha)}"
        )
    for part in parts:
        if part.b > part.c:
            return Admission.Decision.REFUSED, (
                f"the {part.name} alone is worse: pass rate {part.metrics.as_json()['pass_rate']:.3f} vs "
                f"{act['pass_rate']:.3f}; it {_worse(part.b, part.c, part.p, alpha)}"
            )
    cheaper = candidate.cost < active.cost
    fewer_fallbacks = candidate.fallbacks < active.fallbacks
    more_right = c > b
    if not (cheaper or fewer_fallbacks or more_right):
        return Admission.Decision.REFUSED, (
            f"neither cost ({money_display(cand['cost_usd'])} vs {money_display(act['cost_usd'])} per call), "
            "fallback rate "
            f"({cand['fallback_rate']:.3f} vs {act['fallback_rate']:.3f}) nor pass rate improves"
        )
    gains = [
        f"cost {money_display(act['cost_usd'])} -> {money_display(cand['cost_usd'])} per call"
        if cheaper
        else "",
        f"fallback rate {act['fallback_rate']:.3f} -> {cand['fallback_rate']:.3f}" if fewer_fallbacks else "",
        f"pass rate {act['pass_rate']:.3f} -> {cand['pass_rate']:.3f}" if more_right else "",
    ]
    alone = "".join(f"; the {x.name} alone not worse (b={x.b}, c={x.c})" for x in parts)
    return Admission.Decision.ADMITTED, (
        f"pass rate not worse ({cand['pass_rate']:.3f} vs {act['pass_rate']:.3f}, McNemar b={b}, c={c}, "
        f"p={p:.4f}); " + "; ".join(g for g in gains if g) + alone
    )


def best_part(
    active: SideMetrics, parts: Sequence[Part], *, alpha: float, min_items: int
) -> tuple[Part, str] | None:
    """The part of a refused joint candidate to admit by itself: the one with the highest pass rate
    (then the lower cost) of those that pass ``decide`` alone; None when none does."""
    for part in sorted(parts, key=lambda x: (-x.metrics.passed, x.metrics.cost)):
        decision, reason = decide(
            active, part.metrics, b=part.b, c=part.c, p=part.p, alpha=alpha, min_items=min_items
        )
        if decision == Admission.Decision.ADMITTED:
            return part, reason
    return None


def admission_evaluate(
    *,
    profile_id: int,
    kind: str,
    candidate: Configuration,
    active: Configuration,
    candidate_ids: dict[str, Any],
    active_ids: dict[str, Any],
    parts: dict[str, Configuration] | None = None,
) -> Admission:
    """Runs the held-out comparison and records the decision. Applying it is the caller's part.

    ``parts``: a joint candidate's parts, each as a configuration of its own ("adapter": the candidate
    adapter with the active SkillBook; "skillbook": the candidate SkillBook with the active adapter),
    replayed on the same items; the candidate is refused when any of them alone is worse."""
    profile = TaskProfile.objects.select_related("teacher", "student").get(pk=profile_id)
    alpha = conf.get().cycle.admission_alpha
    backends = active_backends()
    labelled = rates(profile)[0] > 0  # the profile labels live answers: admission labels its items too
    items = heldout_items(profile=profile, limit=conf.get().cycle.admission_max_items, backends=backends)
    configurations = [active, candidate, *(parts or {}).values()]
    if items:
        sides = [_side_plans(profile, items, side, backends) for side in configurations]
        required(items[0].plan.teacher, "teacher")
        reservation = heldout_spend.reserve(items, sides)
        try:
            extend = learning_spend.extender(reservation)  # a retry holds one more attempt
            legs, teachers = asyncio.run(_evaluate(items, sides, labelled=labelled, extend=extend))
        except BaseException:
            learning_spend.release(reservation)
            raise
        heldout_spend.record(profile_id, items, sides, legs, teachers, reservation)
    else:
        legs, teachers = [[] for _ in configurations], []
    active_legs, candidate_legs = legs[0], legs[1]
    act, cand = _metrics(active_legs, teachers), _metrics(candidate_legs, teachers)
    b, c, p = mcnemar(act.outcomes, cand.outcomes)
    judged_parts, part_legs = [], dict(zip(parts or {}, legs[2:], strict=True))
    for name, side_legs in part_legs.items():
        metrics = _metrics(side_legs, teachers)
        judged_parts.append(Part(name, metrics, *mcnemar(act.outcomes, metrics.outcomes)))
    min_items = conf.get().cycle.admission_min_items
    decision, reason = decide(act, cand, b=b, c=c, p=p, alpha=alpha, min_items=min_items, parts=judged_parts)
    extra: dict[str, Any] = {"parts": {x.name: x.as_json() for x in judged_parts}} if judged_parts else {}
    admitted_ids = candidate_ids
    best = (
        best_part(act, judged_parts, alpha=alpha, min_items=min_items)
        if decision == Admission.Decision.REFUSED
        else None
    )
    if best is not None:
        # The admitted side is the part: its figures (auto-rollback compares live correctness with
        # them), its McNemar counts and its per-item legs; the joint candidate's stay beside them.
        part, part_reason = best
        extra.update(joint=cand.as_json(), proposed=candidate_ids, admitted_part=part.name)
        decision = Admission.Decision.ADMITTED
        reason = (
            f"the {part.name} alone is admitted: {part_reason} (the joint candidate was refused: {reason})"
        )
        admitted_ids = {part.name: candidate_ids[part.name]} if part.name in candidate_ids else {}
        cand, candidate_legs, (b, c, p) = part.metrics, part_legs[part.name], (part.b, part.c, part.p)
    candidate_metrics: dict[str, Any] = {**cand.as_json(), "labelled": labelled, **extra}
    per_item = [
        {
            "key": item.key[:16],
            "active": {"student": a.passed, "passed": ao, "wrong": a.wrong, "error": a.error[:200]},
            "candidate": {"student": k.passed, "passed": ko, "wrong": k.wrong, "error": k.error[:200]},
            "teacher": None if t is None else t.passed,
        }
        for item, a, k, t, ao, ko in zip(
            items, active_legs, candidate_legs, teachers, act.outcomes, cand.outcomes, strict=True
        )
    ]
    with transaction.atomic():
        return Admission.objects.create(
            profile=profile,
            kind=kind,
            candidate=admitted_ids,
            active=active_ids,
            candidate_metrics=candidate_metrics,
            active_metrics=act.as_json(),
            mcnemar_b=b,
            mcnemar_c=c,
            p_value=p,
            alpha=alpha,
            decision=decision,
            reason=reason,
            items=per_item,
        )
