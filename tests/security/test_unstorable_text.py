"""Text no database column can take: U+0000 (PostgreSQL's text and jsonb refuse it) and lone UTF-16
surrogates (not Unicode). A request body with a lone surrogate is refused in its interface's error shape;
NUL is valid JSON, so the gateway serves it and the ledger stores U+FFFD (tests/routing/
test_ledger_writer.py); /api/ refuses NUL as its fields cannot hold it; anything else written through the
ORM (a model's answer, a tool's output) is stored with U+FFFD by the database edge (core/db_text.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from core.storable import REPLACEMENT, storable, storable_text
from diagnostics.models import Incident
from routing import scopes
from routing.models import Invocation
from tests.factories import make_key
from tests.support.fake_environment import incident_user

BAD = "\ud800"


def test_storable_replaces_nul_and_lone_surrogates_and_keeps_a_clean_value_as_it_is():
    clean = {"a": ["text", 1, 2.5, None, True], "b": {"c": "\U0001f600"}}
    assert storable(clean) is clean and storable_text(clean) is clean
    dirty = {"a\u0000": ["x\u0000y", BAD, 10**30], "b": {"c": "\udc00z"}}
    assert storable(dirty) == {"a\ufffd": ["x\ufffdy", REPLACEMENT, str(10**30)], "b": {"c": "\ufffdz"}}
    assert storable_text(dirty) == {"a\ufffd": ["x\ufffdy", REPLACEMENT, 10**30], "b": {"c": "\ufffdz"}}
    assert storable_text("a\\u0000") == "a\\u0000"  # the six characters, not a NUL


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("path", "body", "error_of"),
    [
        ("/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": BAD}]}, "openai"),
        ("/v1/responses", {"model": "auto", "input": f"x{BAD}"}, "openai"),
        (
            "/v1/messages",
            {"model": "auto", "max_tokens": 5, "messages": [{"role": "user", "content": BAD}]},
            "anthropic",
        ),
    ],
)
def test_a_lone_surrogate_in_a_request_is_a_400_in_its_protocols_shape(
    gateway_url, backends, api_key, stub, path, body, error_of
):
    response = httpx.post(
        gateway_url + path,
        content=json.dumps(body).encode(),  # json.dumps writes the lone surrogate as the escape \ud800
        headers={"Authorization": f"Bearer {api_key.raw}", "x-api-key": api_key.raw},
        timeout=30,
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "lone UTF-16 surrogate" in error["message"]
    if error_of == "anthropic":
        assert response.json()["type"] == "error" and error["type"] == "invalid_request_error"
    else:
        assert error["type"] == "invalid_request_error"
    assert not Invocation.objects.exists() and stub.requests == []


@pytest.mark.django_db(transaction=True)
def test_a_surrogate_pair_written_as_escapes_is_one_character_and_served(
    gateway_url, backends, api_key, stub
):
    body = '{"model": "auto", "messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}]}'
    response = httpx.post(
        gateway_url + "/v1/chat/completions",
        content=body.encode(),
        headers={"Authorization": f"Bearer {api_key.raw}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert Invocation.objects.get().request["messages"][0]["content"] == "smile \U0001f600"


@pytest.mark.django_db
def test_the_operations_api_refuses_nul_with_its_own_error(client):
    requester = incident_user("requester", approver=True, operator=True)
    key = make_key(name="r", owner=requester, scopes=[scopes.INCIDENTS_READ, scopes.INCIDENTS_WRITE]).raw
    body = {"text": "checkout pods keep restarting\u0000 in namespace shop", "environment": "fake"}
    response = client.post(
        "/api/incidents",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "Request body holds a NUL character (\\u0000), which no field can store.",
        "code": "invalid_json",
    }
    assert not Incident.objects.exists()


@pytest.mark.django_db
def test_text_and_json_written_through_the_orm_are_stored_with_the_replacement_character():
    incident = Incident.objects.create(
        title=f"disk\u0000full {BAD}",
        description="logs: \u0000\u0000",
        alert={"labels": {"pod": f"web\u0000{BAD}"}, "n": 10**30},
        environment="fake",
    )
    incident.refresh_from_db()
    assert (incident.title, incident.description) == ("disk\ufffdfull \ufffd", "logs: \ufffd\ufffd")
    assert incident.alert == {"labels": {"pod": "web\ufffd\ufffd"}, "n": 10**30}
    Incident.objects.filter(pk=incident.pk).update(description="\u0000")  # an UPDATE's parameter too
    assert Incident.objects.filter(title__startswith="disk\u0000").count() == 1  # a lookup's too


@pytest.mark.django_db(transaction=True)
def test_a_nul_in_a_looked_up_name_is_an_unknown_profile_not_a_database_error(
    gateway_url, backends, api_key, stub
):
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "metadata": {"task": "x\u0000"}}
    response = httpx.post(
        gateway_url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {api_key.raw}"},
        timeout=30,
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "unknown_task_profile"
