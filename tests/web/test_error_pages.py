"""A missing page or item and a refused page are dashboard pages (issue 41's newcomer pass): the
navigation, what happened in words and a way back, never Django's bare "The requested resource was not
found on this server."; an htmx request gets the message alone (it is swapped into part of a page), and
the API keeps its JSON errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db


def test_a_missing_item_is_a_dashboard_page_with_the_way_back(as_role: Callable[[str], Client]) -> None:
    viewer = as_role("viewer")
    for path in ("/incidents/99999999999999999999/", "/profiles/424242/", "/no-such-page"):
        response = viewer.get(path)
        assert response.status_code == 404, path
        page = response.content.decode()
        assert 'data-error-page="404"' in page and f"<code>{path}</code>" in page, path
        assert 'id="main-nav"' in page and 'href="/calls/"' in page, path
        assert "requested resource" not in page


def test_a_refused_page_says_why(as_role: Callable[[str], Client]) -> None:
    response = as_role("nobody").get("/keys/")
    assert response.status_code == 403
    page = response.content.decode()
    assert 'data-error-page="403"' in page and "You need the permission" in page
    assert "<h1>403 Forbidden</h1>" not in page


def test_htmx_gets_the_message_alone_and_the_api_keeps_json(as_role: Callable[[str], Client]) -> None:
    viewer = as_role("viewer")
    response = viewer.get("/incidents/424242/", HTTP_HX_REQUEST="true")
    assert response.status_code == 404
    page = response.content.decode()
    assert 'data-error-page="404"' in page and "<header" not in page and "<html" not in page
    api = viewer.get("/api/no-such-endpoint")
    assert api.status_code == 404 and api["Content-Type"].startswith("application/json")


def test_a_form_with_a_stale_token_is_refused_in_words(people: dict[str, User]) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["admin"])
    response = client.post("/keys/", {"name": "stale"})
    assert response.status_code == 403
    page = response.content.decode()
    assert 'data-error-page="403-csrf"' in page and "Nothing was changed" in page
    assert "CSRF verification failed" not in page
