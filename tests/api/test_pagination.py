"""Every list of the operations API answers one page: ``limit`` (1..200, default 50) and ``offset``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from app.api.api import api
from diagnostics import services
from diagnostics.api_auth import MAX_PAGE_SIZE, PAGE_SIZE
from routing import scopes
from tests.api.conftest import call, role_key
from tests.factories import AdmissionFactory, TaskProfileFactory

pytestmark = pytest.mark.django_db


def _document() -> dict[str, Any]:
    return json.loads(json.dumps(api.get_openapi_schema()))  # as served: status codes are strings


def _lists() -> dict[str, str]:
    """Path -> the key of its rows, for every GET whose answer is a list."""
    document = _document()
    schemas = document["components"]["schemas"]
    found = {}
    for path, operations in document["paths"].items():
        if "get" not in operations:
            continue
        ref = operations["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        properties = schemas[ref.rsplit("/", 1)[1]]["properties"]
        rows = [name for name, prop in properties.items() if prop.get("type") == "array"]
        if rows:
            found[path] = rows[0]
    return found


def test_every_list_pages_with_a_bounded_limit() -> None:
    lists = _lists()
    assert lists == {
        "/api/incidents": "incidents",
        "/api/cycles": "cycles",
        "/api/training-runs": "training_runs",
        "/api/admissions": "admissions",
        "/api/mcp/servers": "servers",
        "/api/mcp/audit": "rows",
    }
    document = _document()
    for path in lists:
        parameters = {p["name"]: p["schema"] for p in document["paths"][path]["get"]["parameters"]}
        assert parameters["limit"]["maximum"] == MAX_PAGE_SIZE and parameters["limit"]["default"] == PAGE_SIZE
        assert parameters["offset"]["minimum"] == 0, path


def test_pages_of_incidents_walk_the_list_newest_first(
    client: Client, enqueued: list[tuple[str, int]]
) -> None:
    opened = [services.incident_open(title=f"incident {n}", environment="fake").pk for n in range(7)]
    key = role_key("viewer", scopes.INCIDENTS_READ)
    seen, offset, pages = [], 0, 0
    while offset is not None:
        body = call(client, "GET", f"/api/incidents?limit=3&offset={offset}", key).json()
        assert (body["limit"], body["offset"]) == (3, offset) and len(body["incidents"]) <= 3
        seen += [incident["id"] for incident in body["incidents"]]
        offset, pages = body["next_offset"], pages + 1
    assert seen == opened[::-1] and pages == 3
    whole = call(client, "GET", "/api/incidents", key).json()
    assert [i["id"] for i in whole["incidents"]] == seen and whole["next_offset"] is None


def test_pages_of_admissions_filtered_by_profile(client: Client) -> None:
    mine, other = TaskProfileFactory.create(name="mine"), TaskProfileFactory.create(name="other")
    made = [AdmissionFactory.create(profile=mine).pk for _ in range(3)]
    AdmissionFactory.create(profile=other)
    key = role_key("viewer", scopes.LEARNING_READ)
    first = call(client, "GET", "/api/admissions?profile=mine&limit=2", key).json()
    assert [a["id"] for a in first["admissions"]] == made[:0:-1] and first["next_offset"] == 2
    last = call(client, "GET", "/api/admissions?profile=mine&limit=2&offset=2", key).json()
    assert [a["id"] for a in last["admissions"]] == made[:1] and last["next_offset"] is None
    unknown = call(client, "GET", "/api/admissions?profile=nope", key)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "query",
    ["limit=0", f"limit={MAX_PAGE_SIZE + 1}", "limit=many", "offset=-1", "offset=99999999999999999999"],
)
@pytest.mark.parametrize("path", ["/api/incidents", "/api/cycles", "/api/training-runs", "/api/admissions"])
def test_a_page_out_of_bounds_is_a_400(client: Client, path: str, query: str) -> None:
    key = role_key("viewer", scopes.INCIDENTS_READ, scopes.LEARNING_READ)
    response = call(client, "GET", f"{path}?{query}", key)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_field" and query.split("=")[0] in error["message"]
