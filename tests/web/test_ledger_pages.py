"""Overview, Calls and Keys with Django's test client: the numbers from the ledger, filters and
pagination with a bounded number of queries, keys created (secret shown once) and revoked."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse
from django.utils import timezone

from app.web import queries
from routing.access.keys import authenticate
from routing.models import ApiKey, Backend
from tests.factories import ApiKeyFactory, BackendFactory, InvocationFactory, TaskProfileFactory

pytestmark = pytest.mark.django_db

TEACHER_IN, TEACHER_OUT = Decimal("0.00001"), Decimal("0.00003")


CALL_LINK = re.compile(rb'href="/calls/[0-9a-f-]{36}/"')


def rows(content: bytes) -> int:
    """How many calls a page lists (links to a call's page)."""
    return len(CALL_LINK.findall(content))


def leg(role: str, cost: str, verdict: str) -> dict[str, object]:
    return {"backend": role, "role": role, "model": f"{role}-model", "cost_usd": cost, "verdict": verdict}


@pytest.fixture
def ledger() -> dict[str, object]:
    """Three calls: the student passes; the student fails and the teacher answers; the teacher alone."""
    BackendFactory.create(
        name="teacher",
        role=Backend.Role.TEACHER,
        input_cost_per_token=TEACHER_IN,
        output_cost_per_token=TEACHER_OUT,
    )
    code, json_ = (
        TaskProfileFactory.create(name="python-code"),
        TaskProfileFactory.create(name="extract-json"),
    )
    alice, bob = ApiKeyFactory.create(name="alice"), ApiKeyFactory.create(name="bob")
    now = timezone.now()
    student = InvocationFactory.create(
        api_key=alice,
        profile=code,
        created_at=now - timedelta(hours=2),
        route="student",
        served_by="student",
        verdict="pass",
        prompt_tokens=100,
        completion_tokens=50,
        cost_usd=Decimal("0.00025"),
        legs=[leg("student", "0.00025", "pass")],
    )
    fallback = InvocationFactory.create(
        api_key=alice,
        profile=json_,
        created_at=now - timedelta(hours=1),
        route="student",
        served_by="teacher",
        fallback=True,
        verdict="pass",
        prompt_tokens=80,
        completion_tokens=40,
        cost_usd=Decimal("0.00102"),
        legs=[leg("student", "0.00002", "fail"), leg("teacher", "0.001", "pass")],
        verdict_detail="JSON does not match the schema: 'country' is a required property",
    )
    teacher = InvocationFactory.create(
        api_key=bob,
        profile=json_,
        created_at=now - timedelta(minutes=5),
        route="teacher",
        served_by="teacher",
        verdict="fail",
        prompt_tokens=10,
        completion_tokens=10,
        cost_usd=Decimal("0.0004"),
        legs=[leg("teacher", "0.0004", "fail")],
    )
    old = InvocationFactory.create(api_key=bob, profile=json_, created_at=now - timedelta(days=9))
    return {"student": student, "fallback": fallback, "teacher": teacher, "old": old, "alice": alice}


def test_overview_numbers_come_from_the_ledger(ledger) -> None:
    data = queries.overview(range_key="7d")
    t = data.totals
    assert t.calls == 3  # the 9-day-old call is outside the window
    assert t.cost == Decimal("0.00025") + Decimal("0.00102") + Decimal("0.0004")
    # Teacher alone: the student's tokens at teacher prices, the fallback's teacher leg, the teacher call.
    assert t.teacher_cost == 100 * TEACHER_IN + 50 * TEACHER_OUT + Decimal("0.001") + Decimal("0.0004")
    assert t.savings == t.teacher_cost - t.cost
    assert (t.passed, t.verified, t.pass_rate) == (2, 3, 2 / 3)
    assert (t.fallbacks, t.student_routed, t.fallback_rate) == (1, 2, 0.5)
    assert (t.student_served, t.student_share) == (1, 1 / 3)
    per_profile = dict(data.per_profile)
    assert per_profile["extract-json"].calls == 2 and per_profile["python-code"].teacher_cost == Decimal(
        "0.0025"
    )
    assert dict(data.per_key)["alice"].fallbacks == 1
    assert sum(b.calls for _, b in data.series) == 3
    assert queries.overview(range_key="30d").totals.calls == 4


def test_overview_page_shows_the_numbers_and_charts(login, ledger) -> None:
    client = login("viewer")
    page = client.get(reverse("web:overview"))
    assert page.status_code == 200
    html = page.content.decode()
    assert re.search(r'data-stat="calls">3<', html)
    assert 'data-stat="pass-rate">66.7%<' in html and 'data-stat="fallback-rate">50.0%<' in html
    assert html.count("<svg") == 2 and "<rect" in html  # day and hour buckets are bars
    partial = client.get(
        reverse("web:overview") + "?range=24h", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="overview-body"
    )
    assert b"<html" not in partial.content and b'data-stat="calls">3<' in partial.content


def test_calls_filters_and_detail(login, ledger) -> None:
    client = login("viewer")
    url = reverse("web:calls")
    assert rows(client.get(url).content) == 4
    fallback_only = client.get(url, {"fallback": "yes"})
    assert rows(fallback_only.content) == 1
    by_key = client.get(url, {"key": ledger["alice"].pk, "verdict": "pass"})
    assert rows(by_key.content) == 2
    teacher = client.get(url, {"route": "teacher"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="calls-table")
    assert (
        b"<html" not in teacher.content and rows(teacher.content) == 1
    )  # a fallback was routed to the student
    bad = client.get(url, {"since": "2030-01-02T00:00", "until": "2030-01-01T00:00", "route": "teacher"})
    assert bad.status_code == 400
    # The message sits next to the field it is about (never a raw __all__), and the valid filters still apply.
    next_to_until = rb'data-field-errors="until"><li>&#x27;to&#x27; must be after &#x27;from&#x27;'
    assert re.search(next_to_until, bad.content)
    assert b"__all__" not in bad.content
    assert rows(bad.content) == 0  # "from" 2030 applied: nothing is that new
    malformed = client.get(url, {"since": "yesterday", "route": "teacher"})
    assert malformed.status_code == 400 and b'data-field-errors="since"' in malformed.content
    assert rows(malformed.content) == 1  # the route filter still applied; the bad date named, not applied

    detail = client.get(reverse("web:call", args=[ledger["fallback"].pk]))
    assert detail.status_code == 200
    assert b"&#x27;country&#x27; is a required property" in detail.content
    assert detail.content.count(b"-model</td>") == 2  # both legs


def test_calls_page_queries_do_not_grow_with_the_rows(login, ledger, django_assert_max_num_queries) -> None:
    client = login("viewer")
    with django_assert_max_num_queries(10):
        client.get(reverse("web:calls"))
    InvocationFactory.create_batch(60)
    with django_assert_max_num_queries(10):
        page = client.get(reverse("web:calls"))
    assert rows(page.content) == 50 and b"page 1 of 2" in page.content
    with django_assert_max_num_queries(10):
        second = client.get(reverse("web:calls"), {"page": 2})
    assert rows(second.content) == 14


def test_an_admin_creates_a_key_shown_once_and_revokes_it(login, users) -> None:
    client = login("admin")
    response = client.post(reverse("web:keys"), {"name": "ci", "budget_usd": "2.5", "rpm_limit": "60"})
    assert response.status_code == 201
    shown = re.search(rb"data-secret>([^<]+)<", response.content)
    assert shown is not None
    secret = shown.group(1).decode()
    key = ApiKey.objects.get(name="ci")
    assert (key.budget_usd, key.rpm_limit, key.owner) == (Decimal("2.5"), 60, users["admin"])
    assert key.key_hash not in response.content.decode() and secret.startswith(f"sg-{key.prefix}.")
    assert secret.encode() not in client.get(reverse("web:keys")).content  # shown once
    assert async_to_sync(authenticate)(secret) == key  # the secret shown is the key's

    revoked = client.post(reverse("web:key-revoke", args=[key.pk]))
    assert revoked.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_key_form_errors_and_who_may_manage_keys(login) -> None:
    admin = login("admin")
    response = admin.post(reverse("web:keys"), {"name": "", "budget_usd": "-1", "rpm_limit": "0"})
    assert response.status_code == 400
    assert b"This field is required." in response.content
    assert b"Ensure this value is greater than or equal to 0." in response.content
    assert b"Ensure this value is greater than or equal to 1." in response.content
    key = ApiKeyFactory.create(name="theirs")
    viewer = login("viewer")
    assert b"Create key" not in viewer.get(reverse("web:keys")).content
    assert viewer.post(reverse("web:keys"), {"name": "x"}).status_code == 403
    assert viewer.post(reverse("web:key-revoke", args=[key.pk])).status_code == 403
    key.refresh_from_db()
    assert key.revoked_at is None and not ApiKey.objects.filter(name="x").exists()
