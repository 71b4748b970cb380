"""The Responses API's stored responses, through the running server with the openai SDK: continuing
with previous_response_id, retrieve, delete, another key's 404, store=false, retention, failed calls,
input items and cancel (create, stream, tools and formats: test_responses_api.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import openai
import pytest
from django.utils import timezone

from bench.support.openai_stub import Reply
from routing.ledger import ledger_bodies_purge
from routing.ledger import writer as ledger_writer
from routing.models import Invocation
from tests.factories import make_key
from tests.support.gateway import client as sdk

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}


def test_previous_response_id_continues_the_conversation(gateway_url, backends, api_key, stub):
    client = sdk(gateway_url, api_key.raw)
    stub.responder = lambda body: Reply(content="Hi Ada.")
    first = client.responses.create(model="auto", instructions="Be kind.", input="I am Ada.")
    stub.responder = lambda body: Reply(content="You are Ada.")
    second = client.responses.create(
        model="auto", previous_response_id=first.id, instructions="Be brief.", input="Who am I?"
    )
    assert second.previous_response_id == first.id and second.output_text == "You are Ada."
    # The earlier instructions do not carry over; the earlier turn and its answer do.
    assert stub.requests[-1]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "I am Ada."},
        {"role": "assistant", "content": "Hi Ada."},
        {"role": "user", "content": "Who am I?"},
    ]
    third = client.responses.create(model="auto", previous_response_id=second.id, input="And?")
    assert [m["content"] for m in stub.requests[-1]["messages"]] == [
        "I am Ada.",
        "Hi Ada.",
        "Who am I?",
        "You are Ada.",
        "And?",
    ]
    assert third.output_text == "You are Ada."


def test_previous_response_id_works_at_once_with_the_batched_ledger_writer(
    gateway_url, backends, api_key, stub, settings, tmp_path
):
    """Right after a response its row may still be in this process's writer queue: it is found there."""
    ledger_writer.shutdown()  # a writer started earlier has the suite's settings
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "LEDGER_WRITER": "batched",
        "LEDGER_FLUSH_MS": 600_000.0,
        "LEDGER_JOURNAL_DIR": tmp_path / "journal",
    }
    client = sdk(gateway_url, api_key.raw)
    try:
        first = client.responses.create(model="auto", input="I am Ada.")
        assert not Invocation.objects.exists()  # not committed yet
        stub.responder = lambda body: Reply(content="You are Ada.")
        second = client.responses.create(model="auto", previous_response_id=first.id, input="Who am I?")
        assert second.output_text == "You are Ada."
        assert [m["content"] for m in stub.requests[-1]["messages"]] == ["I am Ada.", "ok", "Who am I?"]
        assert client.responses.retrieve(first.id).output_text == "ok"
        client.responses.delete(first.id)  # commits it first, then blanks it
        assert Invocation.objects.get(pk=first.id.removeprefix("resp_")).response is None
    finally:
        assert ledger_writer.flush()
        ledger_writer.shutdown()
    assert Invocation.objects.count() == 2


def test_retrieve_and_delete_keep_the_row_and_its_costs(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content="remember me")
    client = sdk(gateway_url, api_key.raw)
    created = client.responses.create(model="auto", input="hello", metadata={"team": "sre"})
    got = client.responses.retrieve(created.id)
    assert (got.id, got.output_text, got.status, got.metadata) == (
        created.id,
        "remember me",
        "completed",
        {"team": "sre"},
    )
    assert got.usage is not None and got.usage.output_tokens == created.usage.output_tokens  # type: ignore[union-attr]
    row = Invocation.objects.get()
    cost, tokens = row.cost_usd, row.completion_tokens

    client.responses.delete(created.id)
    row.refresh_from_db()
    assert row.response is None and "messages" not in row.request and row.request["deleted"]
    assert (row.cost_usd, row.completion_tokens) == (cost, tokens)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError) as continued:
        client.responses.create(model="auto", previous_response_id=created.id, input="again")
    assert continued.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_another_key_gets_404_for_retrieve_continue_and_delete(gateway_url, backends, api_key, stub):
    created = sdk(gateway_url, api_key.raw).responses.create(model="auto", input="secret")
    other = sdk(gateway_url, make_key(name="other").raw)
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model="auto", previous_response_id=created.id, input="tell me")
    assert len(stub.requests) == 1 and Invocation.objects.get().response is not None


def test_store_false_is_neither_retrievable_nor_continuable(gateway_url, backends, api_key, stub):
    client = sdk(gateway_url, api_key.raw)
    created = client.responses.create(model="auto", input="forget me", store=False)
    assert created.store is False and created.output_text == "ok"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="auto", previous_response_id=created.id, input="again")
    assert "store" not in stub.requests[-1] and "metadata" not in stub.requests[-1]
    assert Invocation.objects.count() == 1  # the call itself is in the ledger


def test_a_chat_completion_id_is_not_a_response(gateway_url, backends, api_key, stub):
    client = sdk(gateway_url, api_key.raw)
    client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])
    row = Invocation.objects.get()
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(f"resp_{row.id.hex}")


def test_a_response_purged_by_retention_says_so(gateway_url, backends, api_key, stub, settings):
    client = sdk(gateway_url, api_key.raw)
    created = client.responses.create(model="auto", input="old news")
    settings.SKILLGATE = {**settings.SKILLGATE, "LEDGER_RETENTION_DAYS": 1}
    assert ledger_bodies_purge(now=timezone.now() + timedelta(days=2)) == 1
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.retrieve(created.id)
    assert "purged" in gone.value.message and "LEDGER_RETENTION_DAYS" in gone.value.message


def test_a_failed_call_is_a_failed_response_that_cannot_be_continued(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(status=500, error="teacher down")
    client = sdk(gateway_url, api_key.raw)
    with pytest.raises(openai.APIStatusError) as failed:
        client.responses.create(model="auto", input="hi")
    assert failed.value.status_code == 502
    response_id = f"resp_{Invocation.objects.get().id.hex}"
    got = client.responses.retrieve(response_id)
    assert got.status == "failed" and got.error is not None and got.output == []
    with pytest.raises(openai.BadRequestError) as continued:
        client.responses.create(model="auto", previous_response_id=response_id, input="again")
    assert "failed" in continued.value.message


def test_input_items_lists_the_requests_own_items_paginated_as_openais(gateway_url, backends, api_key, stub):
    client = sdk(gateway_url, api_key.raw)
    first = client.responses.create(model="auto", instructions="Be terse.", input="hello")
    stub.responder = lambda body: Reply(content="Sunny.")
    items: Any = [
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "thanks"},
    ]
    second = client.responses.create(
        model="auto", instructions="Be brief.", previous_response_id=first.id, input=items, tools=[WEATHER]
    )
    # Oldest first: this request's items only (not the conversation it continued, nor the instructions).
    listed = client.responses.input_items.list(second.id, order="asc")
    kinds = [(item.type, getattr(item, "role", None)) for item in listed.data]
    assert kinds == [
        ("message", "user"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        ("message", "user"),
    ]
    call, output = listed.data[1], listed.data[2]
    assert (call.call_id, call.name, call.arguments) == ("call_1", "get_weather", '{"city": "Oslo"}')
    assert (output.call_id, output.output) == ("call_1", "sunny")
    assert listed.data[0].content[0].text == "weather?" and listed.data[3].content[0].text == "It is sunny."
    assert len({item.id for item in listed.data}) == 5 and listed.has_more is False
    # The default order is newest first; the SDK's pager follows ``after`` page by page.
    page = client.responses.input_items.list(second.id, limit=2)
    assert [item.id for item in page.data] == [item.id for item in listed.data[::-1][:2]] and page.has_more
    assert len(list(page.iter_pages())) == 3
    paged = [item.id for item in client.responses.input_items.list(second.id, limit=2)]
    assert paged == [item.id for item in listed.data[::-1]]
    assert [item.content[0].text for item in client.responses.input_items.list(first.id).data] == ["hello"]

    raw = httpx.get(
        f"{gateway_url}/v1/responses/{second.id}/input_items?limit=2&order=asc&after={listed.data[1].id}",
        headers={"Authorization": f"Bearer {api_key.raw}"},
    ).json()
    assert [item["id"] for item in raw["data"]] == [item.id for item in listed.data[2:4]]
    assert (raw["object"], raw["first_id"], raw["last_id"], raw["has_more"]) == (
        "list",
        listed.data[2].id,
        listed.data[3].id,
        True,
    )
    for query, param in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("order=up", "order"),
        ("after=x", "after"),
    ]:
        bad = httpx.get(
            f"{gateway_url}/v1/responses/{second.id}/input_items?{query}",
            headers={"Authorization": f"Bearer {api_key.raw}"},
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param, (query, bad.text)
    other = make_key(name="other")
    with pytest.raises(openai.NotFoundError):
        sdk(gateway_url, other.raw).responses.input_items.list(second.id)


def test_cancel_answers_openais_error_for_a_response_made_in_the_foreground(
    gateway_url, backends, api_key, stub
):
    client = sdk(gateway_url, api_key.raw)
    response = client.responses.create(model="auto", input="hello")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.cancel(response.id)
    error = refused.value.body
    assert refused.value.message.endswith(
        "Responses can only be cancelled if they were created with background=true."
    )
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"
    assert client.responses.retrieve(response.id).status == "completed"  # untouched
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_" + "0" * 32)
    with pytest.raises(openai.NotFoundError):
        sdk(gateway_url, make_key(name="other").raw).responses.cancel(response.id)
    wrong = httpx.get(
        f"{gateway_url}/v1/responses/{response.id}/cancel", headers={"Authorization": f"Bearer {api_key.raw}"}
    )
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
