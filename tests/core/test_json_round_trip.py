"""A JSON value the API accepts is stored exactly, or refused naming its field (never stored changed).

The property runs on the database of the run: SQLite in the default suite, PostgreSQL in CI's
PostgreSQL run (the ``postgres`` marker). Stores differ in what they give back: PostgreSQL's jsonb
returns 1e16 as the integer 10000000000000000, orjson (the ledger journal) cannot write integers past 64
bits, JSON has no NaN. The parser every endpoint shares (routing/json_body.py) refuses those numbers.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from diagnostics.models import Incident
from routing import scopes
from routing.json_body import JsonBodyError, loads_bounded
from tests.factories import make_key
from tests.support.fake_environment import incident_user

pytestmark = pytest.mark.postgres

TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=12)
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e17, max_value=1e17),
)
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBERS, TEXT),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def canonical(value: Any) -> str:
    """Equal values, of equal types (1 is not 1.0), in any key order."""
    return json.dumps(value, sort_keys=True, allow_nan=True)


def accepted(value: Any) -> Any:
    """``value`` as the API's parser returns it, or JsonBodyError."""
    return loads_bounded(json.dumps({"alert": value}, allow_nan=True), max_depth=64, max_bytes=1 << 20)


@pytest.mark.django_db
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSON)
@example(value=[-0.0, {"x": -0.0, "y": [-0.0]}])  # jsonb has no negative zero
def test_what_the_parser_accepts_reads_back_equal_from_the_database(value: Any) -> None:
    try:
        parsed = accepted(value)["alert"]
    except JsonBodyError as refused:
        assert refused.param and refused.param.startswith("alert")  # named, down to the field
        return
    incident = Incident.objects.create(title="t", alert={"v": parsed}, environment="fake")
    incident.refresh_from_db()
    assert canonical(incident.alert["v"]) == canonical(parsed)


@pytest.mark.parametrize(
    ("number", "field"),
    [
        (2**63, "alert.labels.n"),
        (-(2**63) - 1, "alert.labels.n"),
        (10**30, "alert.labels.n"),
        (1e16, "alert.labels.n"),
        (float("nan"), "alert.labels.n"),
        (float("-inf"), "alert.labels.n"),
    ],
)
def test_numbers_no_store_gives_back_are_refused_naming_the_field(number: float, field: str) -> None:
    with pytest.raises(JsonBodyError) as refused:
        accepted({"labels": {"n": number}})
    assert refused.value.param == field and field in refused.value.message


def test_numbers_every_store_gives_back_are_accepted() -> None:
    for number in (2**63 - 1, -(2**63), 0, 9999999999999998.0, 1e-300, 5e-324, -0.0, 0.1 + 0.2):
        parsed = accepted({"n": number})["alert"]["n"]
        assert parsed == number and type(parsed) is type(number) and not math.isnan(parsed)


@pytest.mark.django_db
def test_a_negative_zero_is_parsed_as_the_zero_every_store_gives_back() -> None:
    parsed = accepted({"n": -0.0, "m": [-0.0, -0e5, -1e-400], "k": -0})["alert"]
    zeros = [parsed["n"], *parsed["m"]]
    assert all(z == 0.0 and type(z) is float and math.copysign(1.0, z) == 1.0 for z in zeros), zeros
    assert parsed["k"] == 0 and type(parsed["k"]) is int
    incident = Incident.objects.create(title="t", alert=parsed, environment="fake")
    incident.refresh_from_db()
    assert canonical(incident.alert) == canonical(parsed)


@pytest.mark.django_db
def test_the_operations_api_refuses_an_alert_it_could_not_store_exactly(client) -> None:
    requester = incident_user("requester", approver=True, operator=True)
    key = make_key(name="r", owner=requester, scopes=[scopes.INCIDENTS_READ, scopes.INCIDENTS_WRITE]).raw
    body = '{"environment": "fake", "alert": {"labels": {"alertname": "X", "count": 100000000000000000000}}}'
    headers = {"Authorization": f"Bearer {key}"}
    response = client.post("/api/incidents", data=body, content_type="application/json", headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"
    assert "alert.labels.count" in response.json()["error"]["message"]
    assert not Incident.objects.exists()
