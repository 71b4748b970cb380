"""Issue 41: every admin change list answers a hostile action selection with its message, never a 500.

Django filters an action's queryset with the selected keys as sent; ``99999999999999999999`` was an
OverflowError and ``a`` a ValueError on every list of the admin site (app/admin_site.py)."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.admin import helpers
from django.test import Client
from django.urls import reverse

from app.admin_site import SelectionChecked

pytestmark = pytest.mark.django_db

HOSTILE = ["99999999999999999999", "a\x00b", "../../etc/passwd", "", "1.5"]


def test_every_registered_admin_checks_the_selection() -> None:
    registered = admin.site._registry
    assert registered and all(isinstance(found, SelectionChecked) for found in registered.values())


@pytest.mark.parametrize("selected", HOSTILE)
def test_a_hostile_selection_is_the_list_again_with_a_message(admin_client: Client, selected: str) -> None:
    for model in admin.site._registry:
        meta = model._meta
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        data = {"action": "delete_selected", helpers.ACTION_CHECKBOX_NAME: [selected], "index": "0"}
        answer = admin_client.post(url, data, follow=True)
        assert answer.status_code == 200, (meta.label, selected)
        assert "is not an item of this list; no action was run." in answer.content.decode(), meta.label
