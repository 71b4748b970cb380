"""Stored data has a lifetime: ledger bodies are purged after the retention period, or never stored.

Calls go through the running server (the gateway writes the ledger as in production); the purge is
the beat task itself. What must survive a purge is what budgets and the dashboard read: the row, its
costs, tokens, legs and verdict. What hash-only mode must not store is any prompt or answer text.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from routing import ledger, tasks
from routing.models import ApiKey, Invocation
from routing.router.versions.data import ledger_records
from tests.factories import make_key
from tests.support.cycle import CITIES, city_prompt, drive, good, json_profile, responder
from training import selectors

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "the launch code is 0000"
HEX64 = re.compile(r"^[0-9a-f]{64}$")
KEPT = (
    "cost_usd",
    "prompt_tokens",
    "completion_tokens",
    "verdict",
    "served_by",
    "route",
    "legs",
    "status_code",
)


def retention(settings, **values: object) -> None:
    settings.SKILLGATE = {**settings.SKILLGATE, **values}


def failing_student_calls(gateway_url: str, count: int) -> list[Invocation]:
    """``count`` calls whose student answer fails the schema and the teacher's passes (replayable)."""
    profile = json_profile()
    key = make_key(name="retained")
    prompts = [city_prompt(*city) for city in CITIES[:count]]
    rows = drive(gateway_url, key.raw, profile.name, prompts)
    assert [r.fallback for r in rows] == [True] * count
    return rows


def test_the_purge_blanks_old_bodies_and_keeps_costs_tokens_and_verdicts(
    gateway_url, backends, stub, settings
):
    retention(settings, LEDGER_RETENTION_DAYS=30)
    stub.responder = responder(student="not json", teacher=lambda body: good("Paris", "France"))
    rows = failing_student_calls(gateway_url, 5)
    old, recent = rows[:3], rows[3:]
    Invocation.objects.filter(pk__in=[r.pk for r in old]).update(
        created_at=timezone.now() - timedelta(days=31)
    )
    before = {r.pk: Invocation.objects.get(pk=r.pk) for r in rows}
    spent = ApiKey.objects.get(name="retained").spent_usd
    assert spent > 0

    assert tasks.ledger_bodies_purge() == 3  # the beat task, run in this process

    for row in old:
        purged, was = Invocation.objects.get(pk=row.pk), before[row.pk]
        assert purged.request == {
            "purged": True,
            "sha256": ledger.digest(was.request),
            "message_count": 2,
        }
        assert purged.response is None
        assert {f: getattr(purged, f) for f in KEPT} == {f: getattr(was, f) for f in KEPT}
        assert "Extract the city" not in json.dumps(purged.request)
    for row in recent:
        assert Invocation.objects.get(pk=row.pk).request == before[row.pk].request
    assert ApiKey.objects.get(name="retained").spent_usd == spent  # the budget does not move
    assert tasks.ledger_bodies_purge() == 0  # done once

    # Readers leave purged rows out instead of failing on them.
    profile_id = rows[0].profile_id
    replayable = {c.pk for c in selectors.failed_student_calls(profile_id=profile_id, sources=1)}
    assert replayable == {r.pk for r in recent}
    assert selectors.failures_since(profile_id=profile_id, since=None) == 2
    assert {r.id for r in ledger_records(profile=rows[0].profile)} == {str(r.pk) for r in recent}

    # The dashboard still shows the purged call: its cost and verdict, no text.
    viewer = User.objects.create_superuser("admin", "admin@example.com", "unused-password-1")
    client = Client()
    client.force_login(viewer)
    page = client.get(reverse("web:call", args=[old[0].pk]))
    assert page.status_code == 200 and b"purged" in page.content and b"Extract the city" not in page.content
    assert client.get(reverse("web:calls")).status_code == 200


def test_the_purge_runs_in_batches_and_retention_zero_keeps_everything(gateway_url, backends, stub, settings):
    stub.responder = responder(student="not json", teacher=lambda body: good("Paris", "France"))
    rows = failing_student_calls(gateway_url, 5)
    Invocation.objects.update(created_at=timezone.now() - timedelta(days=400))

    retention(settings, LEDGER_RETENTION_DAYS=0)
    assert tasks.ledger_bodies_purge() == 0
    assert all(ledger.has_body(r.request) for r in Invocation.objects.all())

    retention(settings, LEDGER_RETENTION_DAYS=365, LEDGER_PURGE_BATCH=2)
    assert ledger.ledger_bodies_purge() == 5  # three batches: 2, 2, 1
    assert not any(ledger.has_body(r.request) for r in Invocation.objects.all())
    assert Invocation.objects.filter(response__isnull=True).count() == len(rows)


def test_hash_only_mode_stores_no_prompt_or_answer_text(
    gateway_url, backends, api_key, stub, settings, monkeypatch
):
    retention(settings, LEDGER_STORE_BODIES=False)
    stub.responder = responder(student="not json", teacher='{"city": "Hidden", "country": "Answerland"}')
    profile = json_profile()
    first = drive(gateway_url, api_key.raw, profile.name, [[{"role": "user", "content": SECRET}]] * 2)
    other = drive(gateway_url, api_key.raw, profile.name, [city_prompt("Lima", "Peru")])

    for row in first + other:
        stored = json.dumps(
            {f.name: getattr(row, f.attname) for f in Invocation._meta.concrete_fields}, default=str
        )
        for text in ("launch code", "Lima", "Hidden", "Answerland", "not json"):
            assert text not in stored, f"{text!r} stored in hash-only mode"
        assert set(row.request) == {"sha256", "message_count"} and HEX64.match(row.request["sha256"])
        assert row.response == {"message": None, "finish_reason": "stop", "sha256": row.response["sha256"]}
        assert HEX64.match(row.response["sha256"])
        # What budgets and the dashboard need is all there.
        assert row.prompt_tokens > 0 and row.completion_tokens > 0 and row.cost_usd > 0
        assert row.fallback and row.verdict == "pass" and row.served_by == "teacher"
    assert first[0].request == first[1].request  # the same prompt, the same hash
    assert first[0].request["message_count"] == 1 and other[0].request["message_count"] == 2
    assert first[0].request["sha256"] != other[0].request["sha256"]

    # What is lost: these failed student calls can be neither replayed nor learned from.
    assert selectors.failed_student_calls(profile_id=profile.pk, sources=1) == []
    assert selectors.failures_since(profile_id=profile.pk, since=None) == 0
    assert ledger_records(profile=profile) == []
    # Nor sampled in the background: the sample would replay the stored request.
    sent: list[str] = []
    monkeypatch.setattr("routing.tasks.sample_leg.delay", sent.append)
    sampled = json_profile("sampled", policy_params={"teacher_sample_rate": 1.0})
    stub.responder = responder(student=good("Lima", "Peru"), teacher=good("Lima", "Peru"))
    (passed,) = drive(gateway_url, api_key.raw, sampled.name, [city_prompt("Lima", "Peru")])
    assert (passed.served_by, passed.verdict, passed.sample_state, sent) == ("student", "pass", "", [])
    retention(settings, LEDGER_STORE_BODIES=True)  # with bodies, the same call is sampled
    (kept,) = drive(gateway_url, api_key.raw, sampled.name, [city_prompt("Lima", "Peru")])
    assert kept.sample_state == "queued" and sent == [str(kept.pk)]
    Invocation.objects.filter(pk__in=[passed.pk, kept.pk]).delete()

    # The purge still blanks the hash-only response once the row is old enough.
    retention(settings, LEDGER_RETENTION_DAYS=1)
    Invocation.objects.update(created_at=timezone.now() - timedelta(days=2))
    assert tasks.ledger_bodies_purge() == 3
    assert Invocation.objects.get(pk=other[0].pk).request == {"purged": True, **other[0].request}
