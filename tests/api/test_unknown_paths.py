"""Any path under /api/ is answered in /api/'s JSON error shape (404 for no operation, 401 or 405 for one
that exists), whatever its characters (a newline, a dot segment, a parameter of the wrong type): never
Django's HTML page."""

from __future__ import annotations

import pytest


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/api/evolver/skills/a%0Ab",
        "/api/nothing%0A",
        "/api/evolver/trajectories/AAA/mark-wrong",
        "/api/incidents/%2E%2E",
        "/api/mcp/servers/%2E/grants/1/revoke",
    ],
)
def test_an_unknown_api_path_is_a_json_404(client, path):
    response = client.get(path)
    assert response.status_code in (401, 404, 405) and response["content-type"] == "application/json"
    assert set(response.json()["error"]) == {"message", "code"}
