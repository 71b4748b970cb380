"""A caller's schema with references is costed in a worker process, never under the serving process's
GIL (issue 37, class 1; routing/verifiers/vetting.py).

Counting the cost of a 64 KB ring of references takes tens of milliseconds of Python: repeated on every
call, in the serving process, that froze everyone. Through the running server, in every place a schema
arrives, the serving process's own cost counter is never called for such a schema (the worker counted
it); the refusal names the limit; nothing reaches the upstream; a legitimate recursive schema is still
accepted on the worker's word; and while several distinct rings arrive at once, ``GET /v1/models``
answers in under a second.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from routing import schemas
from routing.models import Invocation
from tests.security.test_caller_schemas import PLACES, _places, _send
from tests.support.liveness import models_keep_answering

pytestmark = pytest.mark.django_db(transaction=True)


def _ring(variant: int, links: int = 740) -> dict[str, Any]:
    """A 64 KB ring of references through the root, each level doubling (the costliest to count)."""
    defs: dict[str, Any] = {
        f"d{i}": {
            "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}},
            "allOf": [{"$ref": f"#/$defs/d{i + 1}"}],
        }
        for i in range(links)
    }
    defs[f"d{links}"] = {"type": "array", "items": {"$ref": "#"}, "description": f"variant {variant}"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


_CHILDREN = {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}
TREE = {"$defs": {"node": {"type": "object", "properties": _CHILDREN}}, "$ref": "#/$defs/node"}


@pytest.fixture
def counted(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """Each time the serving process counts a schema's cost itself."""
    calls: list[int] = []
    real = schemas.schema_cost

    def counting(schema: dict[str, Any]) -> tuple[int, int, int]:
        calls.append(1)
        return real(schema)

    monkeypatch.setattr(schemas, "schema_cost", counting)
    return calls


@pytest.mark.parametrize("place", PLACES)
def test_a_ring_of_references_is_refused_on_a_workers_count(
    gateway_url, backends, api_key, stub, counted, place
):
    path, body = _places(_ring(variant=PLACES.index(place)))[place]
    response = _send(gateway_url, api_key.raw, path, body)
    assert response.status_code == 400, response.text
    assert "limit" in response.text
    assert counted == []  # the serving process never counted it
    assert stub.requests == [] and Invocation.objects.count() == 0


def test_a_legitimate_recursive_schema_is_accepted_on_a_workers_count(
    gateway_url, backends, api_key, stub, counted
):
    path, body = _places(TREE)["chat.response_format"]
    response = _send(gateway_url, api_key.raw, path, body)
    assert response.status_code == 200, response.text
    assert counted == []
    assert len(stub.requests) == 1


def test_rings_arriving_together_leave_the_server_answering(gateway_url, backends, api_key, stub, counted):
    bodies = [_places(_ring(variant=100 + n))["chat.tools"] for n in range(8)]
    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(8) as pool:
        statuses = [r.status_code for r in pool.map(lambda pb: _send(gateway_url, api_key.raw, *pb), bodies)]
    assert statuses == [400] * 8
    assert counted == []
