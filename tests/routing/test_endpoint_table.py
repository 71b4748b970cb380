"""The endpoint table (routing/api/endpoints.py) is the one list of /v1's paths: routing, error convention,
load shedding, the ledger's endpoint values and the OpenAPI document all read it."""

from __future__ import annotations

import pytest

from routing.api import app, endpoints, inflight
from routing.api.messages import protocol as anthropic
from routing.errors import ApiError
from routing.models import Invocation


def test_every_llm_call_row_is_a_ledger_endpoint_and_nothing_else_is():
    assert {choice.value for choice in Invocation.Endpoint} == endpoints.LLM_CALL_PATHS
    assert inflight.CALL_PATHS is endpoints.LLM_CALL_PATHS


def test_the_openapi_document_has_exactly_the_rows_with_an_entry():
    document = endpoints.document()
    described = {row.path for row in endpoints.ENDPOINTS if row.openapi is not None}
    assert set(document["paths"]) == described
    for row in endpoints.ENDPOINTS:
        if row.openapi is None:
            continue
        # Each described method is one the row serves, and the other way round.
        described_methods = {m.upper() for m in document["paths"][row.path] if m != "parameters"}
        assert described_methods == set(row.methods), row.path
        if row.request_model is not None:
            assert row.request_model.__name__ in document["components"]["schemas"]


@pytest.mark.parametrize("row", endpoints.ENDPOINTS, ids=lambda row: row.path)
def test_each_row_resolves_its_methods_and_refuses_the_others(row):
    path = row.path.replace("{response_id}", "resp_0123")
    for method, handler in row.methods.items():
        assert app.resolve(method, path) is handler
    with pytest.raises(ApiError) as refused:
        app.resolve("PATCH", path)
    assert refused.value.status == 405
    assert refused.value.headers["Allow"] == ", ".join(sorted(row.methods))
    expected = anthropic.error_body if row.errors == "anthropic" else ApiError.body
    assert app.error_body_for(path) == expected


def test_a_path_parameter_is_one_whole_segment():
    assert endpoints.find("/v1/responses/resp_1/input_items") is not None
    for path in ("/v1/responses//input_items", "/v1/responses/a/b/input_items", "/v1/nowhere"):
        assert endpoints.find(path) is None
