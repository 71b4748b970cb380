"""The dashboard's savings are net of the learning key's rows (routing/ledger/learning_spend.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest

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
