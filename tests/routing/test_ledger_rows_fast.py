"""The ledger row built and written with the least work (routing/ledger/record.py ``ledger_row``,
routing/ledger/bulk_copy.py): the same values, column for column, as Django's own ``bulk_create``."""

from __future__ import annotations

import dataclasses
import json
import uuid
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import JSONField

from routing.ledger import CallRecord, Leg, bulk_copy, invocation_of, ledger_row
from routing.models import Invocation
from tests.factories import TaskProfileFactory, make_key

pytestmark = pytest.mark.django_db


def a_leg() -> Leg:
    return Leg(
        backend="student",
        role="student",
        model="m",
        prompt_tokens=21,
        completion_tokens=3,
        cached_tokens=4,
        cost_usd=Decimal("0.00001234"),
        latency_ms=1.5,
        verify_ms=0.25,
        verdict=Invocation.Verdict.FAIL,
        detail="no match",
        error="e",
        error_status=502,
        usage_estimated=True,
        attempts=2,
        cost_basis=Invocation.CostBasis.BOUND,
    )


def test_a_leg_as_json_is_every_field_in_order_with_its_cost_as_text() -> None:
    leg = a_leg()
    expected = {**dataclasses.asdict(leg), "cost_usd": "0.00001234"}
    assert leg.as_json() == expected
    assert list(leg.as_json()) == [field.name for field in dataclasses.fields(Leg)]


def a_row(**changes: Any) -> dict[str, Any]:
    key = make_key().key
    profile = TaskProfileFactory.create()
    record = CallRecord(
        id=uuid.uuid4(),
        api_key_id=key.pk,
        profile_id=profile.pk,
        requested_model="auto",
        route="student",
        policy="learned",
        score=0.42,
        stream=True,
        request={"model": "auto", "messages": [{"role": "user", "content": 'hé \u2028 "q"'}], "n": 2},
        legs=[a_leg(), Leg(backend="teacher", role="teacher", model="t", cost_usd=Decimal("0.5"))],
        served_by="teacher",
        verdict=Invocation.Verdict.PASS,
        response={"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"},
        latency_ms=12.5,
        overhead_ms=1.25,
        sample_state=Invocation.SampleState.QUEUED,
        verifier_source="profile",
    )
    return {**ledger_row(record), **changes}


def stored(pk: str) -> tuple[Any, ...]:
    """The row's columns as the database holds them (raw SQL: no field conversion; JSON text parsed,
    since spacing is the encoder's own)."""
    columns = [field for field in Invocation._meta.concrete_fields if field.attname != "id"]
    names = ", ".join(connection.ops.quote_name(str(field.column)) for field in columns)
    table = connection.ops.quote_name(Invocation._meta.db_table)
    id_value = Invocation._meta.pk.get_db_prep_value(uuid.UUID(pk), connection)  # type: ignore[union-attr]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {names} FROM {table} WHERE id = %s", [id_value])
        values = cursor.fetchone()
    return tuple(
        json.loads(value) if isinstance(field, JSONField) and isinstance(value, str) else value
        for field, value in zip(columns, values, strict=True)
    )


@pytest.mark.parametrize(
    "changes",
    [{}, {"response": None, "score": None, "router_version_id": None}],
    ids=["full", "nulls"],
)
def test_the_fast_insert_writes_what_bulk_create_writes(changes: dict[str, Any]) -> None:
    fast = a_row(**changes)
    slow = {**fast, "id": str(uuid.uuid4())}
    with transaction.atomic():
        bulk_copy.insert([fast])
        Invocation.objects.bulk_create([invocation_of(slow)])
    assert stored(fast["id"]) == stored(slow["id"])
    row = Invocation.objects.get(pk=fast["id"])
    assert row.cost_usd == Decimal(fast["cost_usd"]) and row.legs == fast["legs"]
    assert row.request == fast["request"] and row.response == fast["response"]
    assert row.created_at.isoformat() == fast["created_at"]
    assert Invocation.objects.filter(pk=fast["id"], request__has_key="messages").exists()
