"""The daily actions on the pages where people look, each refused to a user without the role:
edit a key (and the gateway then honours its expiry), create and edit a task profile and try its
verifier on a pasted answer, diagnose an incident again, cancel a learning cycle; Approve asks first."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from diagnostics.models import Trajectory
from routing.budgets.periods import api_keys_budget_reset, budget_period_start
from routing.models import ApiKey, TaskProfile
from routing.services import api_key_update
from tests.factories import ApiKeyFactory, TaskProfileFactory
from tests.factories.diagnostics import IncidentFactory
from tests.factories.routing import make_key
from tests.factories.training import CycleFactory
from training.models import Cycle
from training.services.cycle import orchestrate

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}


def _edit(key: ApiKey, **fields: object) -> dict[str, object]:
    return {f"key{key.pk}-{name}": value for name, value in fields.items()}


def test_an_admin_edits_a_key_and_others_may_not(as_role) -> None:
    key = ApiKeyFactory.create(name="billing", budget_usd=Decimal("1"), rpm_limit=5, scopes=["llm"])
    url = reverse("web:key-edit", args=[key.pk])
    later = (timezone.now() + timedelta(days=30)).replace(second=0, microsecond=0)
    data = _edit(
        key,
        budget_usd="25.50",
        rpm_limit="120",
        scopes=["llm", "incidents:read"],
        expires_at=later.strftime("%Y-%m-%dT%H:%M"),
    )
    for role in ("viewer", "operator", "approver", "nobody"):
        assert as_role(role).post(url, data).status_code == 403
    key.refresh_from_db()
    assert (key.budget_usd, key.rpm_limit, key.scopes, key.expires_at) == (Decimal(1), 5, ["llm"], None)

    response = as_role("admin").post(url, data)
    assert response.status_code == 302
    key.refresh_from_db()
    assert (key.budget_usd, key.rpm_limit, key.scopes, key.expires_at) == (
        Decimal("25.5"),
        120,
        ["llm", "incidents:read"],
        later,
    )
    page = as_role("admin").get(reverse("web:keys")).content.decode()
    assert f"expires {later:%Y-%m-%d %H:%M}" in page and "$25.50" in page

    # Emptied: unlimited and never expiring again; a time in the past is a field error.
    cleared = as_role("admin").post(url, _edit(key, budget_usd="", rpm_limit="", scopes=["llm"]))
    key.refresh_from_db()
    assert cleared.status_code == 302 and (key.budget_usd, key.rpm_limit, key.expires_at) == (
        None,
        None,
        None,
    )
    past = as_role("admin").post(url, _edit(key, expires_at="2001-01-01T00:00", scopes=["llm"]))
    assert past.status_code == 400 and b'data-field-errors="expires_at"' in past.content


def test_an_expired_keys_limits_are_edited_and_its_expiry_kept_to_the_microsecond(as_role) -> None:
    """The field shows minutes; an expiry with seconds sent back unchanged is the key's own (it was
    refused as "in the past", so an expired key's budget could not be edited, and a future one was cut
    to the minute). A changed expiry in the past is still refused."""
    for expiry in (timedelta(days=-1), timedelta(days=3)):
        stored = (timezone.now() + expiry).replace(second=41, microsecond=123_456)
        key = ApiKeyFactory.create(name=f"lapsed{expiry.days}", rpm_limit=5, expires_at=stored)
        url = reverse("web:key-edit", args=[key.pk])
        shown = stored.strftime("%Y-%m-%dT%H:%M")
        saved = as_role("admin").post(url, _edit(key, rpm_limit="9", scopes=["llm"], expires_at=shown))
        key.refresh_from_db()
        assert saved.status_code == 302 and (key.rpm_limit, key.expires_at) == (9, stored)
    earlier = (stored - timedelta(days=5)).strftime("%Y-%m-%dT%H:%M")
    refused = as_role("admin").post(url, _edit(key, rpm_limit="7", scopes=["llm"], expires_at=earlier))
    key.refresh_from_db()
    assert refused.status_code == 400 and b'data-field-errors="expires_at"' in refused.content
    assert (key.rpm_limit, key.expires_at) == (9, stored)


def test_a_revoked_key_is_not_edited(as_role) -> None:
    key = ApiKeyFactory.create(name="old", revoked_at=timezone.now(), rpm_limit=5)
    response = as_role("admin").post(reverse("web:key-edit", args=[key.pk]), _edit(key, rpm_limit="9"))
    key.refresh_from_db()
    assert response.status_code == 400 and key.rpm_limit == 5


def test_the_gateway_refuses_a_key_once_it_has_expired(gateway_url: str, transactional_db: None) -> None:
    pair = make_key(name="expiring")
    models = gateway_url + "/v1/models"
    auth = {"Authorization": f"Bearer {pair.raw}"}
    assert httpx.get(models, headers=auth).status_code == 200
    api_key_update(
        api_key=pair.key,
        budget_usd=None,
        rpm_limit=None,
        scopes=["llm"],
        expires_at=timezone.now() + timedelta(hours=1),
    )
    assert httpx.get(models, headers=auth).status_code == 200  # not yet
    api_key_update(
        api_key=pair.key, budget_usd=None, rpm_limit=None, scopes=["llm"], expires_at=timezone.now()
    )
    refused = httpx.get(models, headers=auth)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"


def _profile_form(**fields: object) -> dict[str, object]:
    return {
        "name": "city-json",
        "policy": "always_teacher",
        "verifier_max_timeout_s": "10",
        "verifier_max_memory_mb": "512",
        **fields,
    }


def test_an_admin_creates_and_edits_a_profile_and_tries_its_verifier(as_role) -> None:
    client = as_role("admin")
    created = client.post(
        reverse("web:profiles"), _profile_form(verifier=json.dumps({"kind": "json_schema"}))
    )
    profile = TaskProfile.objects.get(name="city-json")
    assert created.status_code == 302 and created["Location"] == reverse("web:profile", args=[profile.pk])
    assert profile.verifier == {"kind": "json_schema"} and profile.policy == "always_teacher"

    url = reverse("web:profile", args=[profile.pk])
    edited = client.post(
        url,
        _profile_form(
            policy="learned",
            target="0.9",
            policy_params='{"fallback": "student_with_fallback"}',
            verifier=json.dumps({"kind": "json_schema", "schema": SCHEMA}),
            max_tokens="512",
        ),
    )
    profile.refresh_from_db()
    assert edited.status_code == 302
    assert profile.policy == "learned" and profile.max_tokens == 512
    assert profile.policy_params == {"fallback": "student_with_fallback", "target": 0.9}
    assert profile.verifier == {"kind": "json_schema", "schema": SCHEMA}
    shown = client.get(url).content.decode()
    assert 'value="0.9"' in shown  # the target, in its own field

    tried = reverse("web:profile-try", args=[profile.pk])
    passed = client.post(
        tried, {"answer": '{"city": "Lyon"}'}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="try-it"
    )
    assert passed.status_code == 200 and b"<html" not in passed.content
    assert b'data-verdict="pass"' in passed.content
    failed = client.post(tried, {"answer": '{"town": "Lyon"}'})
    assert b'data-verdict="fail"' in failed.content and b"city" in failed.content

    unusable = client.post(url, _profile_form(verifier='{"kind": "no-such-kind"}'))
    assert unusable.status_code == 400 and b'data-field-errors="verifier"' in unusable.content
    profile.refresh_from_db()
    assert profile.verifier == {"kind": "json_schema", "schema": SCHEMA}  # unchanged
    taken = client.post(reverse("web:profiles"), _profile_form())
    assert taken.status_code == 400 and b"exists already" in taken.content


def test_only_admins_write_profiles_or_run_their_verifier(as_role) -> None:
    profile = TaskProfileFactory.create(
        name="guarded", policy="always_teacher", verifier={"kind": "regex", "pattern": "ok"}
    )
    for role in ("viewer", "operator", "approver"):
        client = as_role(role)
        assert client.get(reverse("web:profile", args=[profile.pk])).status_code == 200
        assert client.post(reverse("web:profiles"), _profile_form(name="sneaky")).status_code == 403
        edit = _profile_form(name="guarded", policy="learned")
        assert client.post(reverse("web:profile", args=[profile.pk]), edit).status_code == 403
        tried = client.post(reverse("web:profile-try", args=[profile.pk]), {"answer": "ok"})
        assert tried.status_code == 403
    assert as_role("nobody").get(reverse("web:profiles")).status_code == 403
    profile.refresh_from_db()
    assert profile.policy == "always_teacher" and not TaskProfile.objects.filter(name="sneaky").exists()


def test_an_operator_diagnoses_again_once_at_a_time(as_role, people, enqueued) -> None:
    incident = IncidentFactory.create(title="api down", created_by=people["viewer"])
    url = reverse("web:incident-rediagnose", args=[incident.pk])
    for role in ("viewer", "approver"):
        assert as_role(role).post(url, {"mode": "analyzers"}).status_code == 403
    assert not incident.trajectories.exists()

    page = as_role("operator").get(reverse("web:incident", args=[incident.pk])).content.decode()
    assert "data-rediagnose" in page and "hx-confirm=" in page
    response = as_role("operator").post(url, {"mode": "analyzers", "confirm": "yes"})
    assert response.status_code == 302
    trajectory = incident.trajectories.get()
    assert trajectory.status == Trajectory.Status.QUEUED and trajectory.requested_mode == "analyzers"
    again = as_role("operator").post(url, {"mode": "analyzers", "confirm": "yes"})
    assert again.status_code == 400 and b"still running" in again.content
    assert incident.trajectories.count() == 1


def test_approve_asks_for_confirmation_like_revoke() -> None:
    with open("templates/web/partials/incident_live.html") as template:
        text = template.read()
    approve = text[text.index("web:action-approve") - 200 : text.index("Approve</button>")]
    # hx-confirm on the form that sends the request (on a button inside it htmx never asks).
    form_tag = approve[approve.rindex("<form") : approve.index(">", approve.rindex("<form"))]
    assert "hx-confirm=" in form_tag


def test_an_operator_cancels_a_cycle_and_it_stays_cancelled(as_role, people) -> None:
    profile = TaskProfileFactory.create(name="learns")
    cycle = CycleFactory.create(profile=profile, status=Cycle.Status.RUNNING, stage=Cycle.Stage.REPLAY)
    url = reverse("web:cycle-cancel", args=[profile.pk, cycle.pk])
    for role in ("viewer", "approver"):
        assert as_role(role).post(url).status_code == 403
    page = as_role("operator").get(reverse("web:learning"), {"profile": profile.pk}).content.decode()
    assert f'data-cancel-cycle="{cycle.pk}"' in page
    assert as_role("operator").post(url).status_code == 302
    cycle.refresh_from_db()
    assert (
        cycle.status == Cycle.Status.CANCELLED
        and cycle.error == f"cancelled by {people['operator'].username}"
    )
    # The stage that was running finishes now: the cycle does not move on.
    running = Cycle.objects.get(pk=cycle.pk)
    running.status = Cycle.Status.RUNNING  # as the stage's worker read it before the cancel
    orchestrate._advance(running)
    cycle.refresh_from_db()
    assert cycle.status == Cycle.Status.CANCELLED and cycle.stage == Cycle.Stage.REPLAY
    after = as_role("operator").get(reverse("web:learning"), {"profile": profile.pk}).content.decode()
    assert "data-cancel-cycle" not in after


def test_a_budget_period_resets_the_spend_once_per_period(as_role) -> None:
    key = ApiKeyFactory.create(name="monthly", budget_usd=Decimal(10), spent_usd=Decimal("9.5"))
    response = as_role("admin").post(
        reverse("web:key-edit", args=[key.pk]),
        _edit(key, budget_usd="10", budget_period="month", scopes=["llm"]),
    )
    key.refresh_from_db()
    assert response.status_code == 302 and key.budget_period == "month"
    assert key.spent_usd == Decimal("9.5")  # a new period counts from this month's start: nothing is forgiven
    this_month = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    assert key.budget_period_start == this_month
    keys_page = as_role("viewer").get(reverse("web:keys")).content.decode()
    assert "resets monthly" in keys_page
    # The spend of a resetting key counts from its period's start: the page says from when, and why
    # spent and reserved can differ from the key's calls on Calls.
    since = re.search(r"data-spent-since>since ([0-9-]+ [0-9:]+)<", keys_page)
    assert since is not None and since.group(1) == this_month.strftime("%Y-%m-%d %H:%M")
    assert "<strong>Reserved</strong> is budget the gateway" in keys_page

    once = ApiKeyFactory.create(name="one-off", spent_usd=Decimal(3))
    assert api_keys_budget_reset() == 0  # the month has not turned
    next_month = (this_month + timedelta(days=32)).replace(day=1, hour=0, minute=5)
    assert api_keys_budget_reset(now=next_month) == 1
    assert api_keys_budget_reset(now=next_month + timedelta(minutes=1)) == 0  # once per period
    key.refresh_from_db()
    once.refresh_from_db()
    assert (key.spent_usd, key.budget_period_start) == (Decimal(0), next_month.replace(minute=0))
    assert once.spent_usd == Decimal(3)  # no period: never reset
    assert "reset-key-budgets" in settings.CELERY_BEAT_SCHEDULE


def test_budget_periods_start_at_utc_boundaries() -> None:
    wednesday = timezone.now().replace(year=2026, month=12, day=9, hour=15, minute=30)
    assert budget_period_start("day", wednesday) == wednesday.replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    assert budget_period_start("week", wednesday).day == 7  # the Monday
    assert budget_period_start("month", wednesday).day == 1
    assert budget_period_start("", wednesday) is None
