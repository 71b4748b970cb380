"""What anyone may ask for costs the serving process next to nothing (issue 37, classes 1 and 5; round
five).

``/api/openapi.json`` is public (it holds no data, only the API's shape). django-ninja built the
document again for every request, about 1 s of the serving process's CPU under the GIL: six anonymous
GETs at once held ``GET /v1/models`` for 1.8 s, with no key and no limit. Now it is built once per
process (app/api/urls.py ``openapi_document``) and served as bytes; a write method is a JSON 405.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.api.api import api
from tests.support.liveness import models_keep_answering

pytestmark = pytest.mark.django_db(transaction=True)


def test_anonymous_openapi_documents_stall_no_one(gateway_url, backends, api_key):
    first = httpx.get(f"{gateway_url}/api/openapi.json", timeout=60)  # built once, here
    assert first.status_code == 200
    document = first.json()
    assert document["openapi"].startswith("3.") and document["info"]["title"] == api.title
    assert "/api/incidents" in document["paths"] and "/api/actions/{action_id}/approve" in document["paths"]
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(8) as threads:
        answers = list(
            threads.map(lambda _: httpx.get(f"{gateway_url}/api/openapi.json", timeout=60), range(12))
        )
    assert {a.status_code for a in answers} == {200}
    assert all(a.content == first.content for a in answers)


def test_a_write_to_the_document_is_a_json_405(gateway_url):
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        response = httpx.request(method, f"{gateway_url}/api/openapi.json", timeout=30)
        assert response.status_code == 405, (method, response.text[:200])
        assert response.json()["error"]["code"] == "method_not_allowed"
        assert response.headers["allow"] == "GET, HEAD"
