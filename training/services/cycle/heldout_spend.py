"""The held-out replay's spend on the books: its worst case held on the learning key before it runs
(each retry holds one more attempt: ``learning_spend.extender``), and what it cost (failed and retried
attempts at their worst case) recorded after, one ledger row per role (routing/ledger/learning_spend.py)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from routing.call.plans import CallPlan
from routing.ledger import learning_spend
from routing.models import Reservation
from training.services.cycle.calls import CycleError, required

if TYPE_CHECKING:
    from training.services.cycle.admission import Item, Leg


def reserve(items: list[Item], sides: list[list[CallPlan]]) -> Reservation:
    """Holds the replay's worst case on the learning key: every student leg, a teacher leg per item."""
    bound = Decimal(0)
    for plans in sides:
        for plan in plans:
            student = required(plan.student, "student")
            bound += learning_spend.call_bound(student, plan.leg_body(student, temperature=0))
    for item in items:
        teacher = required(item.plan.teacher, "teacher")
        bound += learning_spend.call_bound(teacher, item.plan.leg_body(teacher, temperature=0))
    try:
        return learning_spend.reserve(bound)
    except learning_spend.LearningBudgetSpent as exc:
        raise CycleError(exc.message) from None


def record(
    profile_id: int,
    items: list[Item],
    sides: list[list[CallPlan]],
    legs: list[list[Leg]],
    teachers: list[Leg | None],
    reservation: Reservation,
) -> None:
    """What the held-out replay cost, on the ledger under the learning key: one row per role."""
    student = required(sides[0][0].student, "student")
    teacher = required(items[0].plan.teacher, "teacher")
    student_cost = sum((leg.cost for side in legs for leg in side), Decimal(0))
    teacher_cost = sum((leg.cost for leg in teachers if leg is not None), Decimal(0))
    for backend, cost, held in ((student, student_cost, reservation), (teacher, teacher_cost, None)):
        spend = learning_spend.Spend(
            profile_id=profile_id,
            purpose="admission",
            role=backend.role,
            backend=backend.name,
            model=backend.litellm_model,
            cost_usd=cost,
            request={"messages": [item.request.get("messages") for item in items]},
        )
        learning_spend.record(spend, reservation=held)
