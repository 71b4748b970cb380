"""Bad input and failing upstreams get OpenAI-shaped errors with the right status, never a 500,
and never a half-written ledger row."""

from __future__ import annotations

import httpx
import openai
import pytest
from django.conf import settings
from django.test import override_settings

from bench.support.openai_stub import Reply
from routing.models import ApiKey, Invocation
from routing.services import api_key_revoke
from tests.factories import TaskProfileFactory, make_key
from tests.support.gateway import client

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


def post(gateway_url: str, key: str, body: object = None, *, content: bytes | None = None) -> httpx.Response:
    return httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json=body if content is None else None,
        content=content,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=30,
    )


def error_of(resp: httpx.Response) -> dict[str, object]:
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "auto"}, "messages"),
        ({"model": "auto", "messages": "hello"}, "messages"),
        ({"model": "auto", "messages": []}, "messages"),
        ({"model": "auto", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({**HELLO, "temperature": "hot"}, "temperature"),
        ({**HELLO, "temperature": 7}, "temperature"),
        ({**HELLO, "max_tokens": 0}, "max_tokens"),
        ({**HELLO, "n": 0}, "n"),
        ({**HELLO, "n": 17}, "n"),
        ({**HELLO, "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
        ({**HELLO, "response_format": {"type": "yaml"}}, "response_format"),
    ],
)
def test_bad_fields_are_named_in_a_400(gateway_url, backends, api_key, body, param):
    resp = post(gateway_url, api_key.raw, body)
    assert resp.status_code == 400
    assert error_of(resp)["param"] == param
    assert not Invocation.objects.exists()


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe", b""])
def test_malformed_json_is_a_400(gateway_url, backends, api_key, content):
    resp = post(gateway_url, api_key.raw, content=content)
    assert resp.status_code == 400
    assert error_of(resp)["code"] == "invalid_json"


def test_huge_body_is_refused_before_parsing(gateway_url, backends, api_key):
    with override_settings(SKILLGATE={**settings.SKILLGATE, "MAX_BODY_BYTES": 1000}):
        resp = post(
            gateway_url, api_key.raw, {**HELLO, "messages": [{"role": "user", "content": "x" * 5000}]}
        )
    assert resp.status_code == 413
    assert error_of(resp)["code"] == "request_too_large"


def test_unknown_model_and_unknown_profile(gateway_url, backends, api_key):
    resp = post(gateway_url, api_key.raw, {**HELLO, "model": "gpt-17"})
    assert resp.status_code == 404 and error_of(resp)["code"] == "model_not_found"
    resp = post(gateway_url, api_key.raw, {**HELLO, "metadata": {"task": "nope"}})
    assert resp.status_code == 400 and error_of(resp)["param"] == "metadata.task"


def test_bad_verifier_in_metadata_is_a_400(gateway_url, backends):
    TaskProfileFactory.create(name="open", allow_call_verifier=True)
    key = make_key(scopes=["llm", "verifiers:call"])
    metadata = {"task": "open", "verifier": {"kind": "regex", "pattern": "("}}
    resp = post(gateway_url, key.raw, {**HELLO, "metadata": metadata})
    assert resp.status_code == 400 and error_of(resp)["param"] == "metadata.verifier"
    assert "does not compile" in str(error_of(resp)["message"])


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer sg-nothing.here", "Basic abc"])
def test_missing_or_wrong_key_is_a_401(gateway_url, backends, header):
    headers = {"Authorization": header} if header else {}
    resp = httpx.post(f"{gateway_url}/v1/chat/completions", json=HELLO, headers=headers)
    assert resp.status_code == 401
    assert error_of(resp)["type"] == "authentication_error"


def test_revoked_key_is_refused(gateway_url, backends, api_key):
    assert post(gateway_url, api_key.raw, HELLO).status_code == 200
    api_key_revoke(api_key=api_key.key)
    with pytest.raises(openai.AuthenticationError):
        client(gateway_url, api_key.raw).chat.completions.create(**HELLO)


def test_wrong_method(gateway_url, api_key):
    resp = httpx.get(f"{gateway_url}/v1/chat/completions", headers={"Authorization": f"Bearer {api_key.raw}"})
    assert resp.status_code == 405 and error_of(resp)["code"] == "method_not_allowed"


def test_upstream_failure_is_a_502_and_is_logged(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(status=500, error="provider exploded")
    with pytest.raises(openai.APIStatusError) as excinfo:
        client(gateway_url, api_key.raw).chat.completions.create(**HELLO)
    assert excinfo.value.status_code == 502
    row = Invocation.objects.get()
    assert (row.status_code, row.verdict, row.attempts) == (502, "error", 3)
    # A 5xx may come after the provider processed (and billed) the attempt: each of the three is
    # charged its worst case (tests/security/test_billing_attempts.py).
    assert row.cost_basis == "bound" and row.cost_usd > 0
    assert "teacher" in row.error
    key = ApiKey.objects.get(pk=api_key.pk)
    assert key.reserved_usd == 0 and key.spent_usd == row.cost_usd


def test_upstream_timeout_is_a_504(gateway_url, backends, api_key, stub):
    backends["teacher"].timeout_s = 0.5
    backends["teacher"].save()
    stub.responder = lambda body: Reply(delay_s=3)
    resp = post(gateway_url, api_key.raw, HELLO)
    assert resp.status_code == 504, resp.text
    assert error_of(resp)["code"] == "upstream_timeout"


def test_student_server_down_falls_back_to_the_teacher(gateway_url, backends, api_key, stub):
    TaskProfileFactory.create(name="chat", verifier={})
    backends["student"].api_base = "http://127.0.0.1:9/v1"  # nothing listens there
    backends["student"].save()
    raw = client(gateway_url, api_key.raw).chat.completions.with_raw_response.create(
        **HELLO, metadata={"task": "chat"}
    )
    assert raw.headers["x-skillgate-served-by"] == "teacher"
    row = Invocation.objects.get()
    assert [leg["verdict"] for leg in row.legs] == ["error", "unverified"]


def test_streaming_upstream_failure_before_first_byte_is_a_json_error(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(status=503, error="overloaded")
    resp = post(gateway_url, api_key.raw, {**HELLO, "stream": True})
    assert resp.status_code == 502
    assert error_of(resp)["type"] == "upstream_error"
    assert Invocation.objects.get().status_code == 502


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/nothing-here"),
        ("POST", "/v1/chat/completion"),
        ("POST", "/v1/engines/davinci/completions"),
        ("GET", "/v1"),
        ("DELETE", "/v1/"),
        ("GET", "/v1/models/../admin/"),
    ],
)
def test_an_unknown_path_under_v1_is_an_openai_404_in_json(gateway_url, api_key, method, path):
    resp = httpx.request(
        method, f"{gateway_url}{path}", headers={"Authorization": f"Bearer {api_key.raw}"}, timeout=30
    )
    assert resp.status_code == 404
    assert resp.headers["content-type"] == "application/json"
    assert error_of(resp)["message"].startswith(f"Invalid URL ({method} ")


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/v1/chat/completions", "POST"),
        ("PUT", "/v1/chat/completions", "POST"),
        ("POST", "/v1/models", "GET"),
        ("DELETE", "/v1/openapi.json", "GET"),
    ],
)
def test_a_wrong_method_is_an_openai_405_naming_the_allowed_one(gateway_url, api_key, method, path, allowed):
    resp = httpx.request(
        method, f"{gateway_url}{path}", headers={"Authorization": f"Bearer {api_key.raw}"}, timeout=30
    )
    assert resp.status_code == 405
    assert resp.headers["allow"] == allowed
    assert error_of(resp)["code"] == "method_not_allowed"
    assert not Invocation.objects.exists()
