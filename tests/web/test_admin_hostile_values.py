"""The Django admin's forms refuse what its columns cannot hold, next to the field (issue 41; found by
tests/web/test_admin_route_fuzz.py, which is slow): a related id past the key column, NaN in a JSON
field, price options that are no object, and the add form of rows only the services write."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from diagnostics.models import Incident
from routing.models import Backend
from tests.factories.diagnostics import IncidentFactory
from tests.factories.routing import BackendFactory
from tests.factories.users import UserFactory
from tests.web.route_table import rendered_forms
from training.models import Adapter

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser() -> Client:
    client = Client()
    client.raise_request_exception = False
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def _refused(answer: Any, field: str) -> None:
    assert answer.status_code == 200, answer.status_code  # the admin shows its form again
    page = answer.content.decode()
    assert "errornote" in page and f'<div class="form-row errors field-{field}' in page, page[-1500:]


def test_a_related_id_past_the_key_column_is_no_choice(superuser: Client) -> None:
    groups = Group.objects.count()
    answer = superuser.post("/admin/auth/group/add/", {"name": "big", "permissions": "99999999999999999999"})
    _refused(answer, "permissions")
    assert Group.objects.count() == groups


def _as_shown(client: Client, path: str) -> dict[str, Any]:
    """The change form's fields as the admin page fills them in (what a browser would send back)."""
    forms = rendered_forms(path, client.get(path).content.decode())
    fields = next(f.fields for f in forms if f.method == "post" and len(f.fields) > 3)
    return {name: values[-1] for name, values in fields.items() if values}


def test_nan_in_a_json_field_is_refused(superuser: Client, people: dict[str, Any]) -> None:
    incident = IncidentFactory.create(alert={"labels": {"alertname": "Down"}})
    path = f"/admin/diagnostics/incident/{incident.pk}/change/"
    answer = superuser.post(path, {**_as_shown(superuser, path), "alert": "NaN"})
    _refused(answer, "alert")
    assert Incident.objects.get(pk=incident.pk).alert == {"labels": {"alertname": "Down"}}


def test_price_options_that_are_no_object_are_refused(superuser: Client) -> None:
    backend = BackendFactory.create()
    fields = {
        f: getattr(backend, f)
        for f in ("name", "role", "model", "timeout_s", "samples", "min_votes", "input_cost_per_token")
    }
    answer = superuser.post(
        f"/admin/routing/backend/{backend.pk}/change/",
        {
            **{k: "" if v is None else v for k, v in fields.items()},
            "price_options": "5",
            "output_cost_per_token": "0",
        },
    )
    _refused(answer, "price_options")
    assert Backend.objects.get(pk=backend.pk).price_options == backend.price_options


def test_rows_the_services_write_have_no_add_form(superuser: Client) -> None:
    for path in (
        "/admin/training/adapter/add/",
        "/admin/slack/slackevent/add/",
        "/admin/diagnostics/trajectory/add/",
    ):
        assert superuser.post(path, {"_save": "Save"}).status_code == 403, path
    assert Adapter.objects.count() == 0
    assert superuser.get("/admin/routing/taskprofile/add/").status_code == 200  # typed rows keep theirs


def test_an_autocompleted_id_past_the_key_column_is_no_choice(superuser: Client) -> None:
    """The Slack user's user is an autocomplete field: the form refused the id, then showing it again
    looked it up (an OverflowError)."""
    answer = superuser.post(
        "/admin/slack/slackuser/add/",
        {"slack_user_id": "U1", "team_id": "T1", "user": "99999999999999999999"},
    )
    _refused(answer, "user")
