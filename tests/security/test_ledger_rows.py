"""Every served call has its ledger row. NaN and Infinity (Python's parser takes them, JSON has none)
and numbers no column gives back are refused at the edge in the caller's protocol, before anything is
sent or charged; and a row the database refuses for its content is written without that content, never
dropped: the accounting stays, the entry is kept in unstorable.log, and a gauge raises the alarm."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal

import httpx
import pytest
from django.db import connection

from routing import budgets
from routing.ledger import CallRecord, Leg, journal, ledger_row
from routing.ledger.journal import Entry
from routing.models import ApiKey, Invocation
from tests.factories import TaskProfileFactory, make_key
from tests.support.attacks import during

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

HELLO = [{"role": "user", "content": "hi"}]
CHAT, RESPONSES, MESSAGES = "/v1/chat/completions", "/v1/responses", "/v1/messages"
ATTACKS = {
    "chat-metadata-nan": (CHAT, '"metadata": {"x": NaN}'),
    "chat-logit-bias-inf": (CHAT, '"logit_bias": {"1": Infinity}'),
    "chat-max-tokens-1e26": (CHAT, '"max_tokens": 1e26'),
    "chat-max-tokens-2^64": (CHAT, '"max_tokens": 18446744073709551616'),
    "chat-max-tokens-huge": (CHAT, '"max_tokens": 9000000000000000000'),
    "chat-logit-bias-range": (CHAT, '"logit_bias": {"1": 1000}'),
    "responses-max-output-2^64": (RESPONSES, '"max_output_tokens": 18446744073709551616'),
    "responses-max-output-huge": (RESPONSES, '"max_output_tokens": 4611686018427387904'),
    "responses-metadata-inf": (RESPONSES, '"metadata": {"x": -Infinity}'),
    "messages-max-tokens-huge": (MESSAGES, '"max_tokens": 100000000000'),
    "messages-temperature-nan": (MESSAGES, '"temperature": NaN'),
}
BASE = {
    CHAT: {"model": "auto", "messages": HELLO},
    RESPONSES: {"model": "auto", "input": "hi"},
    MESSAGES: {"model": "auto", "max_tokens": 5, "messages": HELLO},
}


@pytest.mark.parametrize(("path", "body"), ATTACKS.values(), ids=ATTACKS.keys())
def test_numbers_outside_a_parameters_range_are_a_400_before_anything_is_sent(
    gateway_url, backends, stub, path, body
):
    pair = make_key(budget_usd=Decimal("0.5"))
    key = pair.raw
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "content-type": "application/json"}
    content = json.dumps({k: v for k, v in BASE[path].items() if k not in body})[:-1] + ", " + body + "}"

    def attack() -> httpx.Response:
        return httpx.post(gateway_url + path, content=content, headers=headers, timeout=30)

    stub.requests.clear()
    [response] = during(attack, gateway_url, key)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert Invocation.objects.count() == 1  # the ordinary call's row only
    assert len(stub.requests) == 1
    pair.key.refresh_from_db()
    assert pair.key.spent_usd == Invocation.objects.get().cost_usd  # nothing charged for the attack


def _entry(api_key: ApiKey, request: dict[str, object]) -> Entry:
    profile = TaskProfileFactory.create(name=f"p-{uuid.uuid4().hex[:6]}")
    record = CallRecord(
        id=uuid.uuid4(), api_key_id=api_key.pk, profile_id=profile.pk, requested_model="auto",
        route="teacher", policy="p", score=None, stream=False, request={}, served_by="teacher",
        verdict="unverified", legs=[Leg("teacher", "teacher", "t", cost_usd=Decimal("0.25"))],
    )  # fmt: skip
    row = ledger_row(record)
    row["request"] = request  # as no edge lets through any more: the writer's last line of defence
    return Entry(row=row, spend=budgets.Spend(key_id=api_key.pk, cost=Decimal(row["cost_usd"])))


@pytest.mark.skipif(
    connection.vendor != "sqlite",
    reason="needs a row the database refuses: SQLite refuses a set; PostgreSQL's COPY writes its text",
)
def test_a_row_the_database_refuses_is_written_without_its_payload_never_dropped():
    """A JSON column's value no encoder of the database's writes (a set: the journal wrote its text):
    the insert refuses the row, as a database refuses content it cannot hold."""
    key = make_key(budget_usd=Decimal(1)).key
    good, bad = _entry(key, {"ok": True}), _entry(key, {"n": {1, 2}})
    assert journal.commit([good, bad]) == 2  # the batch commits; the bad row on its own
    rows = {row.pk: row for row in Invocation.objects.all()}
    assert rows[good.id].request == {"ok": True}
    stored = rows[bad.id]
    assert stored.cost_usd == Decimal(bad.row["cost_usd"]) > 0  # the accounting is kept
    assert stored.request == {"unstorable": stored.verdict_detail} and stored.response is None
    key.refresh_from_db()
    assert key.spent_usd == stored.cost_usd + rows[good.id].cost_usd
    assert journal.unstorable_count() == 1  # the gauge skillgate_ledger_unstorable_rows
    kept = (journal.journal_dir() / "unstorable.log").read_bytes()
    assert str(bad.id).encode() in kept


def test_nan_in_a_row_is_stored_as_null_as_the_journal_wrote_it():
    """The journal (orjson) writes NaN as ``null``, and so does each database's insert now (SQLite's
    was ``json.dumps``, whose ``NaN`` its JSON_VALID refused: the payload was lost)."""
    key = make_key(budget_usd=Decimal(1)).key
    entry = _entry(key, {"n": float("nan"), "text": "\u6f22"})
    refused = journal.unstorable_count()
    assert journal.commit([entry]) == 1
    assert Invocation.objects.get(pk=entry.id).request == {"n": None, "text": "\u6f22"}
    assert journal.unstorable_count() == refused
