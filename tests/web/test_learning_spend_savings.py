"""The dashboard's savings are net of the learning key's rows (routing/ledger/learning_spend.py)."""

from __future__ import annotations

import html
import re
from decimal import Decimal

import pytest
from django.urls import reverse

from app.web import queries
from routing.ledger.learning_spend import POLICY, learning_key
from tests.factories import InvocationFactory, TaskProfileFactory

pytestmark = pytest.mark.django_db


def test_savings_are_net_of_the_learning_spend():
    profile = TaskProfileFactory.create(name="extract")
    InvocationFactory.create(profile=profile, route="teacher", served_by="teacher", cost_usd=Decimal("0.010"))
    before = queries.overview(range_key="24h").totals
    InvocationFactory.create(
        profile=profile,
        api_key=learning_key(),
        route="teacher",
        served_by="teacher",
        policy=POLICY,
        requested_model="learning:replay",
        verdict="unverified",
        cost_usd=Decimal("0.004"),
    )

    after = queries.overview(range_key="24h").totals

    assert after.calls == before.calls == 1  # a learning row is no client call
    assert after.teacher_cost == before.teacher_cost == Decimal("0.010")
    assert after.cost == Decimal("0.014") and after.learning_cost == Decimal("0.004")
    assert after.savings == before.savings - Decimal("0.004")


def test_negative_savings_before_any_learning_spend_say_why(login) -> None:
    """Savings below zero with no learning spend: the student's failed answers were paid for and then the
    teacher's (a fallback costs both legs, the teacher alone one): the Overview says so, with the count."""
    profile = TaskProfileFactory.create(name="extract")
    legs = [{"role": "student", "cost_usd": "0.003"}, {"role": "teacher", "cost_usd": "0.010"}]
    for _ in range(2):
        InvocationFactory.create(
            profile=profile,
            route="student",
            served_by="teacher",
            fallback=True,
            verdict="pass",
            legs=legs,
            cost_usd=Decimal("0.013"),
        )
    totals = queries.overview(range_key="24h").totals
    assert totals.savings == totals.routing_savings == Decimal("-0.006") and totals.learning_cost == 0

    page = html.unescape(login("viewer").get(reverse("web:overview")).content.decode())
    note = re.search(r"<small data-savings-note>(.*?)</small>", page, re.S)
    assert note is not None
    assert note.group(1) == (
        "Negative: routing cost $0.006 more than the teacher alone would have: 2 answers of the student "
        "failed verification and were paid for before the teacher answered again."
    )
