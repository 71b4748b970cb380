"""The Responses API's ``prompt_cache_breakpoint`` (issue 37): an ``input_text`` or ``input_image`` part's
breakpoint asks for a prompt-cache write, so it reaches the chat call as the part's ``cache_control`` and
is priced as one sent to ``/v1/chat/completions``: sent on a backend that prices cache writes, dropped
where none is set (``x-skillgate-cache-write: dropped``); a malformed one is a 400 naming the
caller's part. Through the running gateway with the official ``openai`` SDK."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from routing import price_options
from routing.models import Backend, Invocation
from tests.support.gateway import client

pytestmark = pytest.mark.django_db(transaction=True)

PRICED = {price_options.CACHE_WRITE: "0.0000125"}
LONG = "You are a careful assistant. " * 40


def conversation(marker: Any = None) -> list[dict[str, Any]]:
    marked: dict[str, Any] = {"type": "input_text", "text": LONG}
    if marker is not None:
        marked["prompt_cache_breakpoint"] = marker
    return [
        {"role": "developer", "content": [marked]},
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    ]


def test_a_breakpoint_reaches_the_chat_part_and_is_priced(gateway_url, backends, api_key, stub):
    Backend.objects.filter(pk=backends["teacher"].pk).update(price_options=PRICED)
    sdk = client(gateway_url, api_key.raw)
    reply = sdk.responses.create(
        model="auto", instructions="Be terse.", input=conversation({"mode": "explicit"})
    )  # type: ignore[arg-type]
    assert reply.output_text == "ok"
    [sent] = stub.requests
    assert sent["messages"][1] == {
        "role": "developer",
        "content": [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}],
    }
    assert sent["messages"][2] == {"role": "user", "content": "hi"}
    assert Invocation.objects.get().cost_usd > 0
    items = sdk.responses.input_items.list(reply.id)
    assert [item.type for item in items.data] == ["message", "message"]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_an_unpriced_breakpoint_is_dropped_and_the_call_answers(gateway_url, backends, api_key, stub, stream):
    sdk = client(gateway_url, api_key.raw)
    with sdk.responses.with_streaming_response.create(
        model="auto",
        instructions="Be terse.",
        input=conversation({"mode": "explicit"}),  # type: ignore[arg-type]
        stream=stream,
    ) as response:
        assert response.status_code == 200 and response.headers["x-skillgate-cache-write"] == "dropped"
        response.read()
    [sent] = stub.requests
    assert sent["messages"][1] == {"role": "developer", "content": [{"type": "text", "text": LONG}]}
    assert Invocation.objects.get().status_code == 200


@pytest.mark.parametrize(
    "marker", [{"mode": "implicit"}, {"mode": "explicit", "ttl": "1h"}], ids=["mode", "extra"]
)
def test_a_hostile_breakpoint_is_a_400_naming_it(gateway_url, backends, api_key, stub, marker):
    Backend.objects.filter(pk=backends["teacher"].pk).update(price_options=PRICED)
    with pytest.raises(openai.BadRequestError) as refused:
        client(gateway_url, api_key.raw).responses.create(model="auto", input=conversation(marker))  # type: ignore[arg-type]
    assert refused.value.param == "input[0].content[0].prompt_cache_breakpoint"
    assert stub.requests == []
