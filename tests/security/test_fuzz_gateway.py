"""schemathesis, a real fuzzer, over the OpenAI-compatible endpoints of the running server: valid and
invalid bodies generated from the gateway's own OpenAPI document (routing/api/openapi.py). No input may
get a 5xx other than the upstream's (the stub answers every call, so a 502/504 would be a bug too), and
while each generated request runs a concurrent ``GET /v1/models`` answers within 1 s (liveness, issue 37).
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from routing.api.endpoints import document
from tests.factories import TaskProfileFactory
from tests.support.liveness import models_keep_answering

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

schema = schemathesis.openapi.from_dict(document())
schema.config.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE], max_examples=150
)


@pytest.fixture
def open_profile(backends):  # type: ignore[no-untyped-def]
    """A profile that takes per-call verifiers, so generated ``metadata.verifier`` configs are exercised."""
    return TaskProfileFactory.create(name="open", allow_call_verifier=True)


@schema.parametrize()
@settings(suppress_health_check=list(HealthCheck), deadline=None)
def test_no_input_gets_a_server_error(case, gateway_url, backends, trusted_key, stub, open_profile):  # type: ignore[no-untyped-def]
    with models_keep_answering(gateway_url, trusted_key.raw):
        response = case.call(
            base_url=gateway_url, headers={"Authorization": f"Bearer {trusted_key.raw}"}, timeout=30
        )
    assert response.status_code < 500, (response.status_code, response.text[:500], case.body)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
