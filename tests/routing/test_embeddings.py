"""``POST /v1/embeddings`` with the openai SDK against the running server, the stub serving embeddings;
and the endpoint every ledger row records (chat completions, Messages, embeddings)."""

from __future__ import annotations

import base64
import struct
from datetime import timedelta
from decimal import Decimal
from typing import Any

import anthropic
import httpx
import openai
import pytest
from django.conf import settings
from django.core.paginator import Paginator
from django.template.loader import render_to_string
from django.utils import timezone

from bench.support.openai_stub import OpenAIStub, Reply
from routing.ledger import ledger_bodies_purge
from routing.models import Backend, Invocation
from tests.factories import BackendFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)

PRICE = Decimal("0.00000002")
VECTOR = [0.5, -0.25, 1.0, 0.125]  # exact in float32, so base64 round-trips it exactly


@pytest.fixture
def embedder(backends: dict[str, Backend], stub: OpenAIStub) -> Backend:
    return BackendFactory.create(
        name="embedder",
        role=Backend.Role.TEACHER,
        model="openai/text-embed",
        api_base=stub.base_url,
        input_cost_per_token=PRICE,
        output_cost_per_token=Decimal(0),
    )


@pytest.fixture
def auto_embedder(embedder: Backend, settings: Any) -> Backend:
    # The server runs in this process; the fixture's assignment rebuilds the typed settings.
    settings.SKILLGATE = {**settings.SKILLGATE, "EMBEDDING_BACKEND": embedder.name}
    return embedder


def client(gateway_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0)


def post(gateway_url: str, key: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(
        f"{gateway_url}/v1/embeddings", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def test_vectors_usage_and_a_priced_ledger_row(gateway_url, embedder, api_key, stub):
    raw = client(gateway_url, api_key.raw).embeddings.with_raw_response.create(
        model="embedder", input=["hello world", "three more words"]
    )
    reply = raw.parse()  # the SDK asked for base64 (its default) and decoded it
    assert [d.embedding for d in reply.data] == [VECTOR, [2 * x for x in VECTOR]]
    assert [d.index for d in reply.data] == [0, 1]
    assert (reply.usage.prompt_tokens, reply.usage.total_tokens) == (5, 5)
    sent = stub.requests[-1]
    assert (sent["model"], sent["encoding_format"]) == ("text-embed", "float")
    assert sent["input"] == ["hello world", "three more words"]
    row = Invocation.objects.get()
    assert str(row.id) == raw.headers["x-skillgate-invocation"]
    assert (row.endpoint, row.route, row.served_by, row.policy) == (
        "/v1/embeddings",
        "teacher",
        "teacher",
        "forced",
    )
    assert row.verdict == Invocation.Verdict.UNVERIFIED
    assert (row.prompt_tokens, row.completion_tokens) == (5, 0)
    assert row.cost_usd == PRICE * 5
    assert row.request["input"] == ["hello world", "three more words"]
    assert row.request["model"] == "embedder"
    assert row.response == {"object": "list", "embeddings": 2, "dimensions": 4}


def test_float_and_base64_formats_dimensions_and_token_arrays(gateway_url, embedder, api_key, stub):
    floats = post(
        gateway_url, api_key.raw, {"model": "embedder", "input": [[1, 2, 3]], "encoding_format": "float"}
    )
    assert floats.status_code == 200, floats.text
    assert floats.json()["data"][0]["embedding"] == VECTOR
    assert floats.json()["usage"]["prompt_tokens"] == 3
    packed = post(
        gateway_url,
        api_key.raw,
        {"model": "embedder", "input": "one", "encoding_format": "base64", "dimensions": 2},
    )
    encoded = packed.json()["data"][0]["embedding"]
    assert struct.unpack("<2f", base64.b64decode(encoded)) == tuple(VECTOR[:2])
    assert stub.requests[-1]["dimensions"] == 2


def test_auto_uses_the_configured_embedding_backend(gateway_url, auto_embedder, api_key, stub):
    reply = client(gateway_url, api_key.raw).embeddings.create(model="auto", input="hi")
    assert reply.data[0].embedding == VECTOR
    assert stub.requests[-1]["model"] == "text-embed"
    assert Invocation.objects.get().policy == "embedding"


def test_auto_without_a_configured_backend_is_a_clear_503(gateway_url, embedder, api_key, stub):
    assert not settings.SKILLGATE["EMBEDDING_BACKEND"]
    response = post(gateway_url, api_key.raw, {"model": "auto", "input": "hi"})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_backend"
    assert "SKILLGATE_EMBEDDING_BACKEND" in response.json()["error"]["message"]


def test_the_budget_holds_the_input_bound_at_the_edge(gateway_url, embedder, stub):
    Backend.objects.filter(pk=embedder.pk).update(input_cost_per_token=Decimal("0.001"))
    text = "x" * 100  # bound: 100 bytes + 8 tokens, at $0.001 a token: $0.108
    poor, rich = make_key(budget_usd=Decimal("0.10")), make_key(budget_usd=Decimal("0.11"))
    with pytest.raises(openai.APIStatusError) as refused:
        client(gateway_url, poor.raw).embeddings.create(model="embedder", input=text)
    assert refused.value.status_code == 402
    assert refused.value.body["code"] == "budget_exceeded"
    assert stub.requests == [] and not Invocation.objects.exists()
    client(gateway_url, rich.raw).embeddings.create(model="embedder", input=text)
    row = Invocation.objects.get()
    assert row.cost_usd == Decimal("0.001") and row.prompt_tokens == 1  # the stub counts one word


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "embedder", "input": "x", "api_base": "http://evil"}, "api_base", "unknown_parameter"),
        ({"model": "embedder", "input": "x", "encoding_format": "int8"}, "encoding_format", None),
        ({"model": "embedder", "input": []}, "input", None),
        ({"model": "embedder", "input": ["a", 1]}, "input", None),
        ({"model": "embedder", "input": [[1], []]}, "input", None),
        ({"model": "embedder", "input": ""}, "input", None),
        ({"model": "embedder", "input": "x", "dimensions": 0}, "dimensions", None),
        ({"model": "embedder"}, "input", None),
    ],
)
def test_bad_requests_are_400s_naming_the_field(gateway_url, embedder, api_key, stub, body, param, code):
    response = post(gateway_url, api_key.raw, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"]) == (param, code)
    assert stub.requests == []


def test_unknown_model_is_404_and_no_key_401(gateway_url, embedder, api_key):
    with pytest.raises(openai.NotFoundError) as missing:
        client(gateway_url, api_key.raw).embeddings.create(model="no-such-backend", input="x")
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.AuthenticationError):
        client(gateway_url, "sk-not-a-key").embeddings.create(model="embedder", input="x")


def test_upstream_failure_is_a_502_and_a_row(gateway_url, embedder, api_key, stub):
    stub.responder = lambda body: Reply(status=500, error="embedder down")
    with pytest.raises(openai.APIStatusError) as failed:
        client(gateway_url, api_key.raw).embeddings.create(model="embedder", input="x")
    assert failed.value.status_code == 502
    assert "embedder down" in failed.value.body["message"]
    row = Invocation.objects.get()
    assert (row.status_code, row.verdict, row.endpoint) == (502, "error", "/v1/embeddings")


def test_every_row_shows_the_endpoint_it_came_in_on(gateway_url, embedder, api_key, stub):
    client(gateway_url, api_key.raw).chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hi"}]
    )
    anthropic.Anthropic(base_url=gateway_url, api_key=api_key.raw, max_retries=0).messages.create(
        model="auto", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    client(gateway_url, api_key.raw).embeddings.create(model="embedder", input="hi")
    endpoints = ["/v1/chat/completions", "/v1/messages", "/v1/embeddings"]
    rows = Invocation.objects.order_by("created_at")
    assert [row.endpoint for row in rows] == endpoints
    assert list(Invocation.objects.filter(endpoint="/v1/messages").values_list("endpoint", flat=True)) == [
        "/v1/messages"
    ]
    page = Paginator(Invocation.objects.order_by("-created_at"), 50).get_page(1)
    html = render_to_string("web/partials/calls_table.html", {"page_obj": page, "query": ""})
    assert "<th>Endpoint</th>" in html
    assert all(f"<code>{endpoint}</code>" in html for endpoint in endpoints)


def test_without_stored_bodies_the_input_is_kept_as_a_hash_only(
    gateway_url, embedder, api_key, stub, settings
):
    settings.SKILLGATE = {**settings.SKILLGATE, "LEDGER_STORE_BODIES": False}
    client(gateway_url, api_key.raw).embeddings.create(model="embedder", input="a secret text")
    row = Invocation.objects.get()
    assert list(row.request) == ["sha256"] and len(row.request["sha256"]) == 64
    assert "secret" not in str(row.request) + str(row.response)


def test_the_retention_purge_blanks_an_embeddings_input(gateway_url, embedder, api_key, stub, settings):
    client(gateway_url, api_key.raw).embeddings.create(model="embedder", input="old text")
    days = int(settings.SKILLGATE["LEDGER_RETENTION_DAYS"]) or 30
    settings.SKILLGATE = {**settings.SKILLGATE, "LEDGER_RETENTION_DAYS": days}
    assert ledger_bodies_purge(now=timezone.now() + timedelta(days=days + 1)) == 1
    row = Invocation.objects.get()
    assert row.request["purged"] is True and "input" not in row.request and row.response is None


def test_through_litellm_when_the_direct_client_is_off(gateway_url, embedder, api_key, stub, settings):
    settings.SKILLGATE = {**settings.SKILLGATE, "DIRECT_CLIENT": False}  # every backend through litellm
    reply = client(gateway_url, api_key.raw).embeddings.create(model="embedder", input=["a b", "c"])
    assert [d.embedding for d in reply.data] == [VECTOR, [2 * x for x in VECTOR]]
    assert stub.requests[-1]["model"] == "text-embed"
    assert Invocation.objects.get().cost_usd == PRICE * 3
