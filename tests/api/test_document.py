"""The OpenAPI 3 document of ``/api/`` is valid and complete, the docs page works offline, and every
error has one shape."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from openapi_spec_validator import validate

from tests.api.conftest import call, role_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def document(client: Client) -> dict:  # type: ignore[type-arg]
    response = client.get("/api/openapi.json")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/json")
    return response.json()


def test_the_document_is_valid_openapi_3(document: dict) -> None:  # type: ignore[type-arg]
    assert document["openapi"].startswith("3.")
    validate(document)  # raises on any violation of the OpenAPI 3.x schema


def test_every_operation_declares_its_auth_and_its_errors(document: dict) -> None:  # type: ignore[type-arg]
    schemes = document["components"]["securitySchemes"]
    assert schemes == {
        "BearerKey": {"type": "http", "scheme": "bearer", "description": schemes["BearerKey"]["description"]}
    }
    operations = [(path, method, op) for path, ops in document["paths"].items() for method, op in ops.items()]
    assert len(operations) == 30  # 13, and 17 of MCP (tests/mcp/test_api.py)
    for path, method, operation in operations:
        assert operation["security"] == [{"BearerKey": []}], (path, method)
        errors = [code for code in operation["responses"] if code.startswith("4")]
        assert errors, (path, method)
        for code in errors:
            ref = operation["responses"][code]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/ErrorOut"), (path, method, code)


def test_the_incident_body_describes_free_text_and_alertmanager_webhooks(document: dict) -> None:  # type: ignore[type-arg]
    body = document["paths"]["/api/incidents"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    properties = document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]["properties"]
    assert {"text", "title", "alert", "alerts", "environment", "mode", "source"} <= set(properties)


def test_the_docs_page_loads_its_scripts_from_this_server(client: Client) -> None:
    """Swagger UI from django-ninja's own static files (``ninja`` is an installed app), never a CDN."""
    page = client.get("/api/docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/api/openapi.json" in html
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and not [url for url in assets if "//" in url], assets
    for url in assets:
        if url.endswith((".js", ".css")):
            served = client.get(url)
            assert served.status_code == 200 and b"".join(served.streaming_content), url  # type: ignore[attr-defined]
    assert any(url.endswith("swagger-ui-bundle.js") for url in assets)


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/api/no-such-thing", None, 404, "not_found"),
        ("GET", "/api/", None, 404, "not_found"),
        ("DELETE", "/api/incidents", None, 405, "method_not_allowed"),
        ("GET", "/api/incidents/1/nope", None, 404, "not_found"),
        ("GET", "/api/incidents/99999", None, 404, "not_found"),
        ("POST", "/api/incidents", "[" * 100_000, 400, "invalid_json"),
        ("POST", "/api/incidents", '"a string"', 400, "invalid_json"),
        ("POST", "/api/incidents", {"text": "x" * 20_001}, 400, "invalid_field"),
        ("POST", "/api/incidents", {"alerts": [{"labels": "x"}]}, 400, "invalid_alerts"),
        ("POST", "/api/cycles", {}, 400, "invalid_field"),
        ("POST", "/api/cycles", {"profile": 7}, 400, "invalid_field"),
        ("POST", "/api/evolver/trajectories/1/mark-wrong", {"note": "   "}, 400, "invalid_field"),
        ("POST", "/api/actions/1/approve", {"plan_hash": ["x"]}, 400, "invalid_field"),
    ],
)
def test_every_error_has_the_one_shape(
    client: Client, method: str, path: str, body: object, status: int, code: str
) -> None:
    key = role_key("admin")
    response = call(client, method, path, key, body)
    assert response.status_code == status, response.content
    assert response.json() == {"error": {"message": response.json()["error"]["message"], "code": code}}
    assert response.json()["error"]["message"]
