"""API keys: created by command or admin, shown once, stored hashed, revocable."""

from __future__ import annotations

import io
import re

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command
from django.test import Client

from routing.access.keys import authenticate, hash_key
from routing.models import ApiKey, Backend

pytestmark = pytest.mark.django_db(transaction=True)

KEY_RE = re.compile(r"sg-[0-9a-f]{12}\.[A-Za-z0-9_-]{43}")


def test_create_api_key_command_prints_the_key_once_and_stores_its_hash(gateway_url, backends):
    out = io.StringIO()
    call_command("create_api_key", "--name", "ci-bot", "--budget", "2.5", "--rpm", "30", stdout=out)
    raw = KEY_RE.search(out.getvalue())
    assert raw is not None
    key = ApiKey.objects.get(name="ci-bot")
    assert key.key_hash == hash_key(raw.group()) and raw.group() not in str(key.__dict__)
    assert (str(key.budget_usd), key.rpm_limit) == ("2.50000000", 30)
    resp = httpx.get(f"{gateway_url}/v1/models", headers={"Authorization": f"Bearer {raw.group()}"})
    assert resp.status_code == 200


@pytest.mark.parametrize(
    "args", [["--budget", "lots"], ["--budget", "-1"], ["--rpm", "0"], ["--owner", "ghost"]]
)
def test_create_api_key_command_rejects_bad_options(args):
    with pytest.raises(CommandError):
        call_command("create_api_key", "--name", "x", *args, stdout=io.StringIO())
    assert not ApiKey.objects.exists()


def test_authenticate_rejects_a_tampered_secret(transactional_db):
    out = io.StringIO()
    call_command("create_api_key", "--name", "k", stdout=out)
    match = KEY_RE.search(out.getvalue())
    assert match is not None
    raw = match.group()
    check = async_to_sync(authenticate)
    assert check(raw) is not None
    assert check(raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None
    assert check("sg-unknownprefix.abc") is None


def test_admin_creates_a_key_shown_once_and_revokes_it(admin_user):
    browser = Client()
    browser.force_login(admin_user)
    resp = browser.post(
        "/admin/routing/apikey/add/", {"name": "from-admin", "budget_usd": "1", "rpm_limit": "5"}, follow=True
    )
    shown = KEY_RE.findall(resp.content.decode())
    assert len(shown) == 1
    key = ApiKey.objects.get(name="from-admin")
    assert key.key_hash == hash_key(shown[0])
    page = browser.get(f"/admin/routing/apikey/{key.pk}/change/").content.decode()
    assert not KEY_RE.search(page)  # never shown again

    browser.post("/admin/routing/apikey/", {"action": "revoke", "_selected_action": [key.pk]}, follow=True)
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_health_endpoints(gateway_url):
    assert httpx.get(f"{gateway_url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway_url}/readyz")
    assert ready.status_code == 200 and ready.json()["database"] == "ok"


ADMIN_BACKEND_ADD = "/admin/routing/backend/add/"


def backend_form(name: str, role: str, **fields: str) -> dict[str, str]:
    """The admin's add-backend form, filled as a person would: the defaults, then ``fields``."""
    defaults = {"timeout_s": "30", "samples": "1", "min_votes": "1", "is_active": "on"}
    return {"name": name, "role": role, "model": f"hosted_vllm/{name}", **defaults, **fields}


def test_admin_refuses_a_backend_without_a_price(admin_user):
    browser = Client()
    browser.force_login(admin_user)
    form = backend_form("mine", "teacher")
    resp = browser.post(ADMIN_BACKEND_ADD, form)
    assert resp.status_code == 200 and "set input/output cost per token" in resp.content.decode()
    assert not Backend.objects.filter(name="mine").exists()
    form |= {"input_cost_per_token": "0.000001", "output_cost_per_token": "0.000002"}
    assert browser.post(ADMIN_BACKEND_ADD, form).status_code == 302
    assert Backend.objects.filter(name="mine").exists()


def test_admin_refuses_more_votes_than_samples(admin_user):
    browser = Client()
    browser.force_login(admin_user)
    prices = {"input_cost_per_token": "0.000001", "output_cost_per_token": "0.000002"}
    form = backend_form("voting", "student", samples="3", min_votes="4", **prices)
    resp = browser.post(ADMIN_BACKEND_ADD, form)
    assert resp.status_code == 200 and "can be at most samples (3)" in resp.content.decode()
    assert not Backend.objects.filter(name="voting").exists()
    assert browser.post(ADMIN_BACKEND_ADD, form | {"min_votes": "2"}).status_code == 302
    assert Backend.objects.get(name="voting").min_votes == 2
