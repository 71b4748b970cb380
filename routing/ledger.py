"""Writes the one ledger row of a call and settles its budget reservation, atomically."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from django.db import transaction

from routing import budgets
from routing.models import Invocation, Reservation


@dataclass
class Leg:
    """One upstream attempt of a call."""

    backend: str
    role: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    latency_ms: float = 0.0
    verify_ms: float = 0.0
    verdict: str = Invocation.Verdict.UNVERIFIED
    detail: str = ""
    error: str = ""
    error_status: int = 0
    usage_estimated: bool = False

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost_usd"] = str(self.cost_usd)
        return data


@dataclass
class CallRecord:
    """Everything the ledger keeps about one call; filled in as the call runs."""

    id: uuid.UUID
    api_key_id: int
    profile_id: int
    requested_model: str
    route: str
    policy: str
    score: float | None
    stream: bool
    request: dict[str, Any]
    legs: list[Leg] = field(default_factory=list)
    served_by: str = ""
    verdict: str = Invocation.Verdict.UNVERIFIED
    verdict_detail: str = ""
    status_code: int = 200
    error: str = ""
    response: dict[str, Any] | None = None
    latency_ms: float = 0.0
    overhead_ms: float = 0.0
    router_version_id: int | None = None
    sample_leg: str = ""  # drawn up front: the leg a background sample would add (teacher_sampling)
    sample_state: str = ""

    @property
    def cost_usd(self) -> Decimal:
        return sum((leg.cost_usd for leg in self.legs), Decimal(0))

    @property
    def fallback(self) -> bool:
        return self.route == Invocation.Route.STUDENT and self.served_by == Invocation.Route.TEACHER


def record_call(*, record: CallRecord, reservation: Reservation | None) -> Invocation:
    with transaction.atomic():
        invocation = Invocation.objects.create(
            id=record.id,
            api_key_id=record.api_key_id,
            profile_id=record.profile_id,
            requested_model=record.requested_model,
            route=record.route,
            served_by=record.served_by,
            policy=record.policy,
            score=record.score,
            verdict=record.verdict,
            verdict_detail=record.verdict_detail[:4000],
            fallback=record.fallback,
            stream=record.stream,
            status_code=record.status_code,
            error=record.error[:4000],
            legs=[leg.as_json() for leg in record.legs],
            prompt_tokens=sum(leg.prompt_tokens for leg in record.legs),
            completion_tokens=sum(leg.completion_tokens for leg in record.legs),
            cost_usd=record.cost_usd,
            latency_ms=record.latency_ms,
            overhead_ms=record.overhead_ms,
            request=record.request,
            response=record.response,
            router_version_id=record.router_version_id,
            sample_state=record.sample_state,
        )
        if reservation is None:
            budgets.charge(api_key_id=record.api_key_id, actual=record.cost_usd)
        else:
            budgets.settle(reservation=reservation, actual=record.cost_usd)
    return invocation
