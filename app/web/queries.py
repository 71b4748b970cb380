"""Reads behind the dashboard's ledger pages: the overview's aggregates and the filtered call list.

The overview is computed from one grouped query over the ledger (plus the legs of fallback calls),
so its cost does not grow with the number of calls beyond what the database aggregates.

"Teacher alone" is what the same calls would have cost had the teacher answered each one:
- a call the teacher served without a student attempt: its actual cost;
- a fallback (student failed, teacher answered): the teacher leg's actual cost;
- a call the student served: the teacher's prices times the call's token counts (an estimate:
  the teacher's tokenizer and answer length differ from the student's).

The learning loop's own calls (the learning key's rows, policy ``learning``: routing/ledger/learning_spend.py)
are a cost and nothing else: they add to ``cost`` and ``learning_cost``, never to "teacher alone" or to
the call counts, so the savings are net of what learning spent.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum, TextField
from django.db.models.functions import Cast, TruncDay, TruncHour
from django.utils import timezone

from routing.ledger.learning_spend import POLICY as LEARNING_POLICY
from routing.models import ApiKey, Backend, Invocation, TaskProfile
from routing.pricing import Prices, PricingError, prices_for

RANGES: dict[str, tuple[timedelta, str]] = {
    "24h": (timedelta(hours=24), "hour"),
    "7d": (timedelta(days=7), "day"),
    "30d": (timedelta(days=30), "day"),
}
DEFAULT_RANGE = "7d"


@dataclass
class Totals:
    calls: int = 0
    cost: Decimal = Decimal(0)
    teacher_cost: Decimal = Decimal(0)
    verified: int = 0
    passed: int = 0
    student_routed: int = 0
    fallbacks: int = 0
    student_served: int = 0
    errors: int = 0
    learning_cost: Decimal = Decimal(0)  # in ``cost`` too: the learning loop's own calls

    def add(self, other: Totals) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def savings(self) -> Decimal:
        """Net of the learning spend, which is in ``cost`` and never in ``teacher_cost``."""
        return self.teacher_cost - self.cost

    @property
    def routing_savings(self) -> Decimal:
        """What routing saved on the clients' calls, before the learning spend: negative when the
        student's failed answers, paid for and then answered by the teacher, cost more than it saved."""
        return self.teacher_cost - (self.cost - self.learning_cost)

    @property
    def savings_share(self) -> float | None:
        return float(self.savings / self.teacher_cost) if self.teacher_cost else None

    @property
    def pass_rate(self) -> float | None:
        """Share of verified calls whose final answer passed (unverified calls are not counted)."""
        return self.passed / self.verified if self.verified else None

    @property
    def fallback_rate(self) -> float | None:
        """Share of calls routed to the student that the teacher had to answer."""
        return self.fallbacks / self.student_routed if self.student_routed else None

    @property
    def student_share(self) -> float | None:
        return self.student_served / self.calls if self.calls else None


@dataclass
class Overview:
    range_key: str
    since: datetime
    until: datetime
    bucket: str
    totals: Totals
    series: list[tuple[datetime, Totals]]
    per_profile: list[tuple[str, Totals]]
    per_key: list[tuple[str, Totals]]
    unpriced_teachers: list[str] = field(default_factory=list)


def _teacher_prices() -> tuple[dict[int, Prices | None], Prices | None, list[str]]:
    """Teacher prices per profile id (the profile's own teacher, else the default teacher)."""
    unpriced: list[str] = []
    cache: dict[int, Prices | None] = {}

    def price(backend: Backend | None) -> Prices | None:
        if backend is None:
            return None
        if backend.pk not in cache:
            try:
                cache[backend.pk] = prices_for(backend)
            except PricingError:
                cache[backend.pk] = None
                unpriced.append(backend.name)
        return cache[backend.pk]

    default = price(Backend.objects.filter(is_active=True, role=Backend.Role.TEACHER).order_by("pk").first())
    per_profile = {
        profile.pk: price(profile.teacher) if profile.teacher_id else default
        for profile in TaskProfile.objects.select_related("teacher")
    }
    return per_profile, default, unpriced


def _teacher_legs_cost(legs: Any) -> Decimal:
    if not isinstance(legs, list):
        return Decimal(0)
    return sum(
        (Decimal(str(leg.get("cost_usd", 0))) for leg in legs if leg.get("role") == Backend.Role.TEACHER),
        Decimal(0),
    )


def overview(*, range_key: str = DEFAULT_RANGE, now: datetime | None = None) -> Overview:
    span, bucket = RANGES.get(range_key, RANGES[DEFAULT_RANGE])
    range_key = range_key if range_key in RANGES else DEFAULT_RANGE
    until = now or timezone.now()
    since = until - span
    trunc = TruncHour("created_at") if bucket == "hour" else TruncDay("created_at")
    window = Invocation.objects.filter(created_at__gte=since, created_at__lte=until).annotate(t=trunc)
    prices, default_prices, unpriced = _teacher_prices()

    totals = Totals()
    series: dict[datetime, Totals] = defaultdict(Totals)
    by_profile: dict[int, Totals] = defaultdict(Totals)
    by_key: dict[int, Totals] = defaultdict(Totals)

    def credit(t: datetime, profile_id: int, key_id: int, part: Totals) -> None:
        for target in (totals, series[t], by_profile[profile_id], by_key[key_id]):
            target.add(part)

    groups = window.values(
        "t", "profile_id", "api_key_id", "route", "served_by", "fallback", "verdict", "policy"
    )
    for row in groups.annotate(
        n=Count("id"), cost=Sum("cost_usd"), prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens")
    ).order_by():
        n, cost = row["n"], row["cost"] or Decimal(0)
        if row["policy"] == LEARNING_POLICY:
            credit(row["t"], row["profile_id"], row["api_key_id"], Totals(cost=cost, learning_cost=cost))
            continue
        part = Totals(calls=n, cost=cost)
        if row["verdict"] != Invocation.Verdict.UNVERIFIED:
            part.verified = n
            part.passed = n if row["verdict"] == Invocation.Verdict.PASS else 0
        part.errors = n if row["verdict"] == Invocation.Verdict.ERROR else 0
        part.student_routed = n if row["route"] == Invocation.Route.STUDENT else 0
        part.fallbacks = n if row["fallback"] else 0
        part.student_served = n if row["served_by"] == Invocation.Route.STUDENT else 0
        if row["served_by"] == Invocation.Route.STUDENT:
            teacher = prices.get(row["profile_id"], default_prices)
            if teacher is not None:
                part.teacher_cost = teacher.input * (row["prompt"] or 0) + teacher.output * (
                    row["completion"] or 0
                )
        elif not row["fallback"]:
            part.teacher_cost = cost
        credit(row["t"], row["profile_id"], row["api_key_id"], part)

    fallbacks = window.filter(fallback=True).values_list("t", "profile_id", "api_key_id", "legs")
    for t, profile_id, key_id, legs in fallbacks.iterator():
        credit(t, profile_id, key_id, Totals(teacher_cost=_teacher_legs_cost(legs)))

    profile_names = dict(TaskProfile.objects.filter(pk__in=by_profile).values_list("pk", "name"))
    key_names = dict(ApiKey.objects.filter(pk__in=by_key).values_list("pk", "name"))
    return Overview(
        range_key=range_key,
        since=since,
        until=until,
        bucket=bucket,
        totals=totals,
        series=[(t, series[t]) for t in _buckets(since, until, bucket, series)],
        per_profile=sorted(
            ((profile_names.get(pk, f"#{pk}"), t) for pk, t in by_profile.items()), key=lambda x: -x[1].calls
        ),
        per_key=sorted(
            ((key_names.get(pk, f"#{pk}"), t) for pk, t in by_key.items()), key=lambda x: -x[1].calls
        ),
        unpriced_teachers=unpriced,
    )


def _buckets(since: datetime, until: datetime, bucket: str, seen: dict[datetime, Totals]) -> list[datetime]:
    """Every bucket of the window, empty ones included, so the chart's x axis is real time."""
    step = timedelta(hours=1) if bucket == "hour" else timedelta(days=1)
    start = since.replace(minute=0, second=0, microsecond=0)
    if bucket == "day":
        start = start.replace(hour=0)
    points = []
    t = start
    while t <= until:
        points.append(t)
        t += step
    return sorted(set(points) | set(seen))


# --- calls ---------------------------------------------------------------------------------------


@dataclass
class CallFilters:
    key: int | None = None
    profile: int | None = None
    route: str = ""
    verdict: str = ""
    since: datetime | None = None
    until: datetime | None = None
    fallback: bool | None = None
    text: str = ""
    min_cost: Decimal | None = None
    max_cost: Decimal | None = None
    traffic: str = ""  # "clients" (what Overview counts), "learning" (the learning loop's rows), "" all


def _json_texts(text: str) -> set[str]:
    """``text`` as it can appear inside a JSON column read as text: escaped like a JSON string (quotes,
    backslashes, control characters), with non-ASCII as is (PostgreSQL's jsonb, orjson) or as \\u
    escapes (Python's json, which Django uses on SQLite)."""
    return {json.dumps(text, ensure_ascii=ascii_only)[1:-1] for ascii_only in (False, True)}


def invocation_list(*, filters: CallFilters) -> QuerySet[Invocation]:
    """The ledger, newest first, filtered; the list columns only (no request or response bodies)."""
    qs = Invocation.objects.select_related("api_key", "profile").defer("request", "response", "legs")
    conditions = Q()
    if filters.key:
        conditions &= Q(api_key_id=filters.key)
    if filters.profile:
        conditions &= Q(profile_id=filters.profile)
    if filters.route:
        conditions &= Q(route=filters.route)
    if filters.verdict:
        conditions &= Q(verdict=filters.verdict)
    if filters.since:
        conditions &= Q(created_at__gte=filters.since)
    if filters.until:
        conditions &= Q(created_at__lte=filters.until)
    if filters.fallback is not None:
        conditions &= Q(fallback=filters.fallback)
    if filters.min_cost is not None:
        conditions &= Q(cost_usd__gte=filters.min_cost)
    if filters.max_cost is not None:
        conditions &= Q(cost_usd__lte=filters.max_cost)
    if filters.traffic == "clients":
        conditions &= ~Q(policy=LEARNING_POLICY)
    elif filters.traffic == "learning":
        conditions &= Q(policy=LEARNING_POLICY)
    if filters.text:
        qs = qs.annotate(
            request_text=Cast("request", TextField()), response_text=Cast("response", TextField())
        )
        found = Q(verdict_detail__icontains=filters.text) | Q(error__icontains=filters.text)
        for escaped in _json_texts(filters.text):
            found |= Q(request_text__icontains=escaped) | Q(response_text__icontains=escaped)
        conditions &= found
    return qs.filter(conditions).order_by("-created_at", "-id")


def learning_share(listed: QuerySet[Invocation]) -> int:
    """How many of the listed calls are the learning loop's (Overview counts the others as calls)."""
    return listed.filter(policy=LEARNING_POLICY).count()


def invocation_get(*, invocation_id: str) -> Invocation | None:
    return Invocation.objects.select_related("api_key", "profile").filter(pk=invocation_id).first()
