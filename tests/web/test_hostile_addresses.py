"""Issue 41, the console's hostile pass: every dashboard address with an id out of any integer column's
range (``99999999999999999999``, 2**63) or zero in its path, by GET and POST, and every page's query
parameters (filters, search, pages, audit) with hostile values (NUL, 1e400, NaN, SQL, 5000 digits), are
answered by the page (a 404, a 405, a refusal, the page with a field message), never a 500, on SQLite
and PostgreSQL alike (an id past 2**63 overflows SQLite's integer binding)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.factories import ApiKeyFactory, InvocationFactory
from tests.factories.diagnostics import IncidentFactory

pytestmark = pytest.mark.django_db

IDS = ["99999999999999999999", "9223372036854775808", "9223372036854775807", "0"]
ADDRESSES = [
    "/incidents/{n}/",
    "/incidents/{n}/diagnose",
    "/incidents/{n}/actions/{n}/approve",
    "/keys/{n}/edit",
    "/keys/{n}/revoke",
    "/profiles/{n}/",
    "/profiles/{n}/try",
    "/learning/{n}/cycles",
    "/learning/{n}/cycles/{n}/cancel",
    "/learning/{n}/adapter/rollback",
    "/router/versions/{n}/rollback",
]
VALUES = ["99999999999999999999", "-1", "1e400", "NaN", "\x00", "a\x00b", "' OR 1=1 --", "%_\\", "9" * 5000]
QUERIES = {
    "/": ["range"],
    "/calls/": ["q", "key", "profile", "route", "verdict", "fallback", "traffic", "min_cost", "max_cost",
                "since", "until", "page", "tail"],
    "/calls/export.csv": ["q", "key", "profile", "min_cost", "since", "until"],
    "/calls/export.jsonl": ["key", "profile", "max_cost"],
    "/incidents/": ["page"],
    "/learning/": ["profile"],
    "/router/": ["profile"],
    "/profiles/": ["page"],
    "/keys/": ["page"],
    "/mcp-servers/": ["audit", "server", "tool", "page"],
}  # fmt: skip


@pytest.fixture
def admin(as_role: Any) -> Client:
    client: Client = as_role("admin")
    client.raise_request_exception = False
    InvocationFactory.create(api_key=ApiKeyFactory.create())
    IncidentFactory.create()
    return client


def test_ids_out_of_range_in_an_address_are_never_a_500(admin: Client) -> None:
    failed = []
    for address in ADDRESSES:
        for n in IDS:
            for method in (admin.get, admin.post):
                answer = method(address.format(n=n))
                if answer.status_code >= 500:
                    failed.append((method.__name__, address.format(n=n), answer.status_code))
    assert not failed


def test_hostile_query_values_are_never_a_500(admin: Client) -> None:
    failed = []
    for address, names in QUERIES.items():
        for name in names:
            for value in VALUES:
                answer = admin.get(address, {name: value})
                if answer.status_code >= 500:
                    failed.append((address, name, value[:20], answer.status_code))
    for address in ("/calls/export.xml", "/calls/00000000-0000-0000-0000-000000000000/"):
        assert admin.get(address).status_code == 404
    assert not failed
