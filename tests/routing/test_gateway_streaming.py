"""stream=true through the openai SDK: teacher answers stream through, student answers that
must be verified are buffered and verified before the first byte."""

from __future__ import annotations

import json

import openai
import pytest

from bench.support.openai_stub import Reply
from routing.models import ApiKey, Invocation, Reservation, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.gateway import GOOD, SCHEMA, by_model, client, stream_and_hang_up
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def collect(stream: openai.Stream) -> tuple[str, list[object]]:  # type: ignore[type-arg]
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def test_teacher_answer_streams_through_with_a_final_usage_chunk(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content="one two three four")
    with client(gateway_url, api_key.raw).chat.completions.with_streaming_response.create(
        model="auto",
        messages=[{"role": "user", "content": "count"}],
        stream=True,
        stream_options={"include_usage": True},
    ) as raw:
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert raw.headers["x-skillgate-route"] == "teacher"
        text, chunks = collect(raw.parse())
    assert text.split() == ["one", "two", "three", "four"]
    assert len([c for c in chunks if c.choices]) > 3  # really streamed, piece by piece
    usage = chunks[-1].usage  # type: ignore[attr-defined]
    assert usage is not None and usage.completion_tokens > 0
    row = Invocation.objects.get()
    assert row.stream and row.served_by == "teacher"
    assert row.response["message"]["content"].split() == ["one", "two", "three", "four"]
    assert row.prompt_tokens == usage.prompt_tokens and row.cost_usd > 0
    assert len({c.id for c in chunks}) == 1  # type: ignore[attr-defined]


def test_no_usage_chunk_unless_asked(gateway_url, backends, api_key, stub):
    _, chunks = collect(
        client(gateway_url, api_key.raw).chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert all(c.choices for c in chunks)  # type: ignore[attr-defined]
    assert Invocation.objects.get().cost_usd > 0  # the gateway still priced it from upstream usage


def test_verified_student_stream_is_buffered_and_falls_back(gateway_url, backends, api_key, stub):
    TaskProfileFactory.create(name="extract", verifier={"kind": "json_schema", "schema": SCHEMA})
    stub.responder = by_model(student='{"city": "Paris"}', teacher=GOOD)
    with client(gateway_url, api_key.raw).chat.completions.with_streaming_response.create(
        model="auto",
        messages=[{"role": "user", "content": "Paris"}],
        stream=True,
        stream_options={"include_usage": True},
        metadata={"task": "extract"},
    ) as raw:
        assert raw.headers["x-skillgate-route"] == "student"
        assert raw.headers["x-skillgate-served-by"] == "teacher"
        text, _ = collect(raw.parse())
    assert json.loads(text) == json.loads(GOOD)
    # The student was asked without streaming (buffered), the teacher with streaming.
    assert [(r["model"], bool(r.get("stream"))) for r in stub.requests] == [
        ("student-model", False),
        ("teacher-model", True),
    ]
    row = Invocation.objects.get()
    assert row.fallback and [leg["verdict"] for leg in row.legs] == ["fail", "pass"]


def test_verified_student_stream_that_passes_is_sent_whole(gateway_url, backends, api_key, stub):
    TaskProfileFactory.create(name="extract", verifier={"kind": "json_schema", "schema": SCHEMA})
    stub.responder = by_model(student=GOOD, teacher="unused")
    with client(gateway_url, api_key.raw).chat.completions.with_streaming_response.create(
        model="auto",
        messages=[{"role": "user", "content": "Paris"}],
        stream=True,
        stream_options={"include_usage": True},
        metadata={"task": "extract"},
    ) as raw:
        assert raw.headers["x-skillgate-verdict"] == "pass"
        text, chunks = collect(raw.parse())
    assert json.loads(text) == json.loads(GOOD)
    assert chunks[-1].usage.completion_tokens > 0  # type: ignore[attr-defined]
    assert Invocation.objects.get().served_by == "student"


def test_streamed_tool_calls_are_reassembled(gateway_url, backends, api_key, stub):
    TaskProfileFactory.create(
        name="tools", policy=TaskProfile.Policy.ALWAYS_TEACHER, verifier={"kind": "tool_args"}
    )
    call = {"id": "c1", "type": "function", "function": {"name": "scale", "arguments": '{"replicas": 3}'}}
    stub.responder = lambda body: Reply(content=None, tool_calls=[call])
    tools = [{"type": "function", "function": {"name": "scale", "parameters": {"type": "object"}}}]
    _, chunks = collect(
        client(gateway_url, api_key.raw).chat.completions.create(
            model="auto",
            messages=[{"role": "user", "content": "scale to 3"}],
            tools=tools,  # type: ignore[arg-type]
            stream=True,
            metadata={"task": "tools"},
        )
    )
    deltas = [tc for c in chunks for ch in c.choices for tc in ch.delta.tool_calls or []]  # type: ignore[attr-defined]
    assert deltas[0].function.name == "scale"
    row = Invocation.objects.get()
    assert row.response["message"]["tool_calls"][0]["function"]["arguments"] == '{"replicas": 3}'
    assert row.verdict == "pass"


def test_client_hanging_up_mid_stream_still_writes_one_row_and_settles(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content=" ".join(["word"] * 40), chunk_delay_s=0.05)
    stream_and_hang_up(gateway_url, api_key.raw)  # hangs up after the first words
    wait_until(Invocation.objects.exists, timeout=10, what="the ledger row after the client hung up")
    row = Invocation.objects.get()
    assert row.served_by == "teacher" and row.stream
    assert 0 < len(row.response["message"]["content"].split()) < 40
    # The cut-off stream never sent usage: the tokens are counted and charged, marked as estimated.
    (leg,) = row.legs
    assert leg["usage_estimated"] and leg["completion_tokens"] > 0 and row.cost_usd > 0
    key = ApiKey.objects.get(pk=api_key.pk)
    assert key.reserved_usd == 0 and key.spent_usd == row.cost_usd and not Reservation.objects.exists()
