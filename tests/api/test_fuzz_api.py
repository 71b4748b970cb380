"""schemathesis over the operations API's own OpenAPI document (``/api/openapi.json``), against the
running server: valid and invalid requests for every operation, as an admin with every scope so that
bodies get past the auth to the schemas and services. No input may get a 5xx, and every error is the
API's one shape."""

from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from app.api.api import api
from tests.api.conftest import role_key
from tests.factories import KeyPair, TaskProfileFactory
from tests.support.fake_environment import FakeEnvironment  # noqa: F401  (registers the "fake" environment)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

schema = schemathesis.openapi.from_dict(json.loads(json.dumps(api.get_openapi_schema())))
schema.config.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE], max_examples=60
)


@pytest.fixture
def admin_key(transactional_db: None, enqueued: list[tuple[str, int]]) -> KeyPair:
    """An admin's key with every scope, and a profile a generated cycle request may name."""
    TaskProfileFactory.create(name="extract")
    return role_key("admin")


@schema.parametrize()
@settings(suppress_health_check=list(HealthCheck), deadline=None)
def test_no_input_gets_a_server_error(case, gateway_url, admin_key):  # type: ignore[no-untyped-def]
    response = case.call(
        base_url=gateway_url, headers={"Authorization": f"Bearer {admin_key.raw}"}, timeout=30
    )
    assert response.status_code < 500, (response.status_code, response.text[:500], case.body)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "code"}, response.text[:500]
        assert error["code"] not in {"missing_scope", "permission_denied"}, error  # the admin may do all
