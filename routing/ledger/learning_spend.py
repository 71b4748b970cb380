"""Learning spend in the books: what the learning loop itself costs, on the ledger under its own key.

The cycle's upstream calls (replay's teacher answers and self-repair retries, the SkillBook's
distillation, admission's held-out replays) and the gateway's background samples are not a client's
calls, and no client key pays for them. Each one is written to the ledger as an Invocation under the
**learning key** (``LEARNING_KEY_NAME``, created on demand with ``DEFAULT_BUDGET_USD``, which the
operator changes on the key like any key's budget), with policy ``learning`` and ``requested_model``
``learning:<purpose>``, its cost charged to that key, every attempt the provider may bill included:
an attempt that timed out, was cut or failed with a 5xx is charged its worst case, as the gateway
charges it (routing/call/attempts.py), and a retry is made only when the learning key's budget holds
one more attempt (``extender``), so retries count against the learning cap. The request is kept as a
hash only (``routing.ledger.record.request_stub``), so no replay, router training or held-out set ever
reads these rows as traffic. A call is refused when its worst case does not fit the key's budget
(``LearningBudgetSpent``): the loop stops spending, the gateway's clients are unaffected.

The dashboard's savings are net of these rows: they add to the cost and never to "teacher alone".
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction

from core.errors import ServiceError
from core.money import money_display
from routing import budgets
from routing.access.keys import generate_key
from routing.budgets.store import reservation_extend
from routing.ledger.record import request_stub
from routing.models import ApiKey, Backend, Invocation, Reservation
from routing.pricing import PricingError, attempt_bound, prices_for

LEARNING_KEY_NAME = "learning (cycle teacher calls, background samples)"
POLICY = "learning"
DEFAULT_BUDGET_USD = Decimal("10.00")
UNBOUNDED_MAX_TOKENS = 4096


class LearningBudgetSpent(ServiceError):
    """The learning key's budget cannot hold this call's worst case."""

    code = "learning_budget_spent"
    status = 402


def learning_key() -> ApiKey:
    """The learning key, created on first use: no scopes (it can call nothing) and its own budget."""
    key = ApiKey.objects.filter(name=LEARNING_KEY_NAME).order_by("pk").first()
    if key is not None:
        return key
    _, prefix, digest = generate_key()  # the raw secret is dropped: nobody calls with this key
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().filter(name=LEARNING_KEY_NAME).order_by("pk").first()
        return key or ApiKey.objects.create(
            name=LEARNING_KEY_NAME, prefix=prefix, key_hash=digest, scopes=[], budget_usd=DEFAULT_BUDGET_USD
        )


def call_bound(backend: Backend, body: dict[str, Any]) -> Decimal:
    """The worst case of one upstream attempt, as the gateway bounds one (``attempt_bound``: every
    prompt byte a token at the dearest input price, the body's ``max_tokens``, ``UNBOUNDED_MAX_TOKENS``
    when it sets none, for each of the ``n`` answers asked, the parameters' prices)."""
    try:
        prices = prices_for(backend)
    except PricingError:
        return Decimal(0)  # an unpriced backend costs nothing the ledger can count
    answers = max(int(body.get("n") or 1), 1)
    max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or UNBOUNDED_MAX_TOKENS)
    return attempt_bound(prices, body, max_tokens=max_tokens, answers=answers)


def reserve(amount: Decimal) -> Reservation:
    """Holds ``amount`` on the learning key (raises LearningBudgetSpent when it does not fit)."""
    key = learning_key()
    try:
        return budgets.reserve(api_key_id=key.pk, amount=amount)
    except budgets.BudgetExceeded:
        raise LearningBudgetSpent(
            f"The learning key's budget ({money_display(key.budget_usd)}) cannot hold a call of up to "
            f"{money_display(amount)}."
        ) from None


def extend(reservation: Reservation, amount: Decimal) -> bool:
    """Holds ``amount`` more on a learning reservation (one more attempt); False when the learning
    key's budget cannot hold it: then the attempt is not made."""
    return reservation_extend(reservation=reservation, amount=amount)


def extender(reservation: Reservation) -> Callable[[Decimal], Awaitable[bool]]:
    """:func:`extend` for an upstream call's retries (``Attempts.extend``), awaited in its event loop."""
    return sync_to_async(functools.partial(extend, reservation))


@dataclass(frozen=True)
class Spend:
    """One learning call as the ledger keeps it."""

    profile_id: int
    purpose: str  # replay, self_repair, skillbook, admission, sample
    role: str  # the backend's role: teacher or student
    backend: str
    model: str
    cost_usd: Decimal
    request: dict[str, Any]
    error: str = ""


def record(spend: Spend, *, reservation: Reservation | None) -> Invocation:
    """Writes the ledger row and charges the learning key (settling ``reservation`` when there is one)."""
    key = learning_key()
    leg = {
        "backend": spend.backend,
        "role": spend.role,
        "model": spend.model,
        "cost_usd": str(spend.cost_usd),
        "purpose": spend.purpose,
    }
    with transaction.atomic():
        invocation = Invocation.objects.create(
            api_key=key,
            profile_id=spend.profile_id,
            requested_model=f"learning:{spend.purpose}",
            route=spend.role,
            served_by=spend.role if not spend.error else "",
            policy=POLICY,
            verdict=Invocation.Verdict.ERROR if spend.error else Invocation.Verdict.UNVERIFIED,
            status_code=502 if spend.error else 200,
            error=spend.error[:1000],
            legs=[leg],
            cost_usd=spend.cost_usd,
            request=request_stub(spend.request),
        )
        if reservation is not None:
            budgets.settle(reservation=reservation, actual=spend.cost_usd)
        else:
            budgets.charge(api_key_id=key.pk, actual=spend.cost_usd)
    return invocation


def release(reservation: Reservation) -> None:
    """Gives a reservation back whole (the call never reached the upstream)."""
    budgets.settle(reservation=reservation, actual=Decimal(0))


__all__ = [
    "DEFAULT_BUDGET_USD",
    "LEARNING_KEY_NAME",
    "POLICY",
    "LearningBudgetSpent",
    "Spend",
    "call_bound",
    "extend",
    "extender",
    "learning_key",
    "record",
    "release",
    "reserve",
]
