"""A key stands for its owner: a deactivated owner's keys stop on every surface, a deleted owner's keys are
revoked (routing/access/owners.py). Driven with the real openai client and httpx against the running
server."""

from __future__ import annotations

import httpx
import openai
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from routing import scopes
from routing.models import ApiKey
from tests.factories import UserFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]


def _chat(url: str, raw: str) -> str:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=raw, max_retries=0, timeout=60)
    return client.chat.completions.create(model="auto", messages=HELLO).choices[0].message.content or ""


def _refused(url: str, raw: str) -> None:
    with pytest.raises(openai.AuthenticationError) as refused:
        _chat(url, raw)
    assert refused.value.status_code == 401


def test_a_deactivated_owners_key_stops_everywhere_and_comes_back_with_the_owner(
    gateway_url, backends, stub
) -> None:
    leaver = UserFactory.create(username="leaver", roles=["operator"])
    key = make_key(name="leaver-key", owner=leaver, scopes=[scopes.LLM, scopes.INCIDENTS_READ])
    service = make_key(name="service", scopes=[scopes.LLM])  # no owner: a service key, unaffected
    assert _chat(gateway_url, key.raw) == "ok"  # cached by the server's lookups from here on

    leaver.is_active = False
    leaver.save()

    _refused(gateway_url, key.raw)
    incidents = httpx.get(
        f"{gateway_url}/api/incidents", headers={"Authorization": f"Bearer {key.raw}"}, timeout=60
    )
    assert incidents.status_code == 401, incidents.text
    assert _chat(gateway_url, service.raw) == "ok"
    page = Client()
    page.force_login(UserFactory.create(username="boss", roles=["admin"]))
    row = page.get(reverse("web:keys")).content.decode().split('data-key="leaver-key"')[1].split("</tr>")[0]
    assert "owner deactivated" in row

    leaver.is_active = True
    leaver.save()
    assert _chat(gateway_url, key.raw) == "ok"


def test_a_deleted_owners_keys_are_revoked_not_left_ownerless(gateway_url, backends, stub) -> None:
    leaver = UserFactory.create(username="gone", roles=["operator"])
    key = make_key(name="gone-key", owner=leaver, scopes=[scopes.LLM])
    assert _chat(gateway_url, key.raw) == "ok"

    User.objects.filter(pk=leaver.pk).delete()

    row = ApiKey.objects.get(pk=key.key.pk)
    assert row.owner is None and row.revoked_at is not None
    _refused(gateway_url, key.raw)
