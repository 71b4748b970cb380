"""Bodies are bounded in elements and depth while they are parsed, not after (issue 37, class 1).

A 3.9 MB body of nested empty arrays, under the body limit and within the depth limit, was parsed and
walked on the event loop and froze every call of the process. routing/json_body.py now counts a body's
elements at C speed before anything walks it (SKILLGATE_MAX_JSON_ELEMENTS): each shape below is refused
with a 400 in its interface's convention while a concurrent GET /v1/models answers within a second.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from django.contrib.auth.models import User

from routing import scopes
from routing.models import Invocation
from tests.factories import make_key
from tests.support.liveness import models_keep_answering

pytestmark = pytest.mark.django_db(transaction=True)

SIZE = 3_900_000  # under the 4 MiB body limit
HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}


def inside_a_call(payload: bytes) -> bytes:
    """``payload`` as the value of a field of an otherwise ordinary chat call."""
    head = json.dumps(HELLO)[:-1].encode() + b', "metadata": {"x": '
    return head + payload + b"}}"


SHAPES = {
    "nested empty arrays": b"[" + b",".join([b"[" * 60 + b"]" * 60] * (SIZE // 122)) + b"]",
    "wide empty arrays": b"[" + b"[]," * (SIZE // 3) + b"[]]",
    "empty objects": b"[" + b"{}," * (SIZE // 3) + b"{}]",
    "small objects": b"[" + b'{"a":[0]},' * (SIZE // 10) + b"{}]",
    "short strings": b"[" + b'"",' * (SIZE // 3) + b'""]',
    "numbers": b"[" + b"-0," * (SIZE // 3) + b"0]",
    "arrays beside a string of brackets": b'["' + b"[{," * 100_000 + b'",' + b"[]," * 1_000_000 + b"[]]",
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_body_of_many_elements_is_refused_while_the_loop_stays_free(
    gateway_url, backends, api_key, stub, shape
):
    body = inside_a_call(SHAPES[shape])
    assert len(body) < 4 * 1024 * 1024
    headers = {"Authorization": f"Bearer {api_key.raw}", "Content-Type": "application/json"}
    httpx.post(f"{gateway_url}/v1/chat/completions", json=HELLO, headers=headers, timeout=30)  # warm
    stub.requests.clear()
    Invocation.objects.all().delete()
    with models_keep_answering(gateway_url, api_key.raw):
        time.sleep(0.1)  # the probe is running before the body arrives
        started = time.monotonic()
        response = httpx.post(f"{gateway_url}/v1/chat/completions", content=body, headers=headers, timeout=60)
        took = time.monotonic() - started
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "invalid_json" and "SKILLGATE_MAX_JSON_ELEMENTS" in error["message"]
    assert took < 2, f"the refusal took {took:.2f} s"
    assert stub.requests == [] and not Invocation.objects.exists()


def test_the_operations_api_refuses_such_a_body_in_its_own_shape(gateway_url, backends, api_key):
    owner = User.objects.create_superuser("root", "root@example.com", "unused-password-1")
    operations = make_key(name="ops", owner=owner, scopes=list(scopes.ALL))
    with models_keep_answering(gateway_url, api_key.raw):
        response = httpx.post(
            f"{gateway_url}/api/incidents",
            content=SHAPES["wide empty arrays"],
            headers={"Authorization": f"Bearer {operations.raw}", "Content-Type": "application/json"},
            timeout=60,
        )
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"message", "code"}
    assert "SKILLGATE_MAX_JSON_ELEMENTS" in response.json()["error"]["message"]


def test_a_body_within_the_bounds_is_still_served(gateway_url, backends, api_key, stub):
    """Thousands of elements, as an agent's long conversation has, are far inside the bound."""
    messages = [
        {"role": "user" if n % 2 else "assistant", "content": f"turn {n}, [x] {{y}}"} for n in range(3000)
    ]
    body = {**HELLO, "messages": [*messages, {"role": "user", "content": "hi"}]}
    response = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {api_key.raw}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text[:300]
