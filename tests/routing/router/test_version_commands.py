"""router_retrain / router_rollback commands and the RouterVersion admin."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from routing.models import RouterVersion
from routing.router.learning.runtime import forget_routers
from tests.support.ledger import fill, learned_profile

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _hashing(settings):  # type: ignore[no-untyped-def]
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "FEATURES": "hashing"},
    }
    forget_routers()


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_retrain_prints_the_chosen_point_and_admission_then_rollback():
    profile = learned_profile()
    fill(profile)
    first = run("router_retrain", "--profile", profile.name)
    assert "v1 candidate" in first and "admission: v1 active" in first and "held out" in first
    assert "admission: v2 active" in run("router_retrain", "--profile", profile.name, "--target", "0.9")
    assert RouterVersion.objects.get(number=2).target_pass_rate == 0.9

    assert "v1 is active" in run("router_rollback", "--profile", profile.name, "--to", "1")
    assert RouterVersion.objects.get(status="active").number == 1
    with pytest.raises(CommandError, match="retired"):
        run("router_rollback", "--profile", profile.name, "--to", "1")


def test_retrain_without_data_fails_loudly():
    profile = learned_profile()
    with pytest.raises(CommandError, match="cannot train"):
        run("router_retrain", "--profile", profile.name)


def test_admin_lists_versions_and_rolls_back(admin_client):
    profile = learned_profile()
    fill(profile)
    run("router_retrain", "--profile", profile.name)
    run("router_retrain", "--profile", profile.name)
    page = admin_client.get("/admin/routing/routerversion/")
    assert page.status_code == 200 and b"retired" in page.content
    first = RouterVersion.objects.get(number=1)
    admin_client.post(
        "/admin/routing/routerversion/", {"action": "roll_back", "_selected_action": [first.pk]}
    )
    assert RouterVersion.objects.get(status="active").number == 1
    assert admin_client.get(f"/admin/routing/routerversion/{first.pk}/change/").status_code == 200
