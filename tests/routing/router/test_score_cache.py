"""A loaded router's score cache (routing/router/learning/runtime.py): a call it scored before is not
featurized again, any input its features read makes another call, and the cache is bounded."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from routing.router.learning import runtime
from routing.router.learning.evaluate import EvalReport
from routing.router.learning.features import CallInput, Featurizer
from routing.router.learning.runtime import LoadedRouter


@pytest.fixture
def counted(mixed_report: EvalReport, featurizer: Featurizer, monkeypatch) -> tuple[LoadedRouter, list]:
    """A router whose featurizer records each call it featurizes."""
    router = LoadedRouter(mixed_report.router.model, 0.5, featurizer)
    seen: list[CallInput] = []
    transform = featurizer.transform

    def counting(call: CallInput) -> Any:
        seen.append(call)
        return transform(call)

    monkeypatch.setattr(featurizer, "transform", counting)
    return router, seen


def _reference(mixed_report: EvalReport, featurizer: Featurizer, call: CallInput) -> float:
    return float(mixed_report.router.model.score(Featurizer.transform(featurizer, call)))


def test_a_call_sent_again_is_not_featurized_again(counted, mixed_report, featurizer, mixed_test):
    router, seen = counted
    for record in mixed_test[:20]:
        first = router.decide(CallInput.from_record(record))
        again = router.decide(CallInput.from_record(record))  # a new object, the same request
        assert again == first
        assert first.score == _reference(mixed_report, featurizer, CallInput.from_record(record))
    assert len(seen) == 20
    assert router.known_score(CallInput.from_record(mixed_test[0])) == router.score(
        CallInput.from_record(mixed_test[0])
    )
    assert router.known_score(CallInput.from_record(mixed_test[20])) is None


def _variants(call: CallInput) -> dict[str, CallInput]:
    messages = [dict(m) for m in call.messages]
    last = messages[-1]
    last["content"] = f"{last.get('content') or ''}!"
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    return {
        "one character of a message": dataclasses.replace(call, messages=messages, _texts={}),
        "a tool": dataclasses.replace(call, tools=[*call.tools, tool], _texts={}, _tool_texts=[]),
        "the response schema": dataclasses.replace(call, response_format=schema, _texts={}),
        "the profile": dataclasses.replace(call, profile=call.profile + "-other", _texts={}),
        "the verifier": dataclasses.replace(call, has_verifier=not call.has_verifier, _texts={}),
        "the turn": dataclasses.replace(call, turn_index=call.turn_index + 1, _texts={}),
        "the SkillBook": dataclasses.replace(call, skillbook_matched=not call.skillbook_matched, _texts={}),
    }


def test_every_input_the_features_read_is_in_the_key(counted, mixed_report, featurizer, mixed_test):
    router, seen = counted
    call = CallInput.from_record(mixed_test[3])
    router.score(call)
    variants = _variants(CallInput.from_record(mixed_test[3]))
    digests = {name: v.digest() for name, v in variants.items()}
    assert len(set(digests.values()) | {call.digest()}) == len(variants) + 1
    for name, variant in variants.items():
        assert router.known_score(variant) is None, name
        fresh = dataclasses.replace(variant, _texts={}, _tool_texts=[])
        assert router.score(variant) == _reference(mixed_report, featurizer, fresh), name
    assert len(seen) == 1 + len(variants)


def test_the_cache_is_bounded_and_keeps_the_recent(counted, mixed_test, monkeypatch):
    router, seen = counted
    monkeypatch.setattr(runtime, "SCORES_CACHED", 3)
    calls = [CallInput.from_record(r) for r in mixed_test[:5]]
    for call in calls:
        router.score(call)
    router.score(CallInput.from_record(mixed_test[2]))  # a hit: now the most recent
    assert len(seen) == 5 and len(router._scores) == 3
    router.score(CallInput.from_record(mixed_test[5]))  # evicts the least recent: calls[3]
    assert router.known_score(CallInput.from_record(mixed_test[2])) is not None
    assert router.known_score(CallInput.from_record(mixed_test[3])) is None
    assert router.known_score(CallInput.from_record(mixed_test[0])) is None


def test_a_call_json_cannot_encode_is_scored_uncached(counted, mixed_report, featurizer):
    router, seen = counted
    odd = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {1, 2}}}  # a set
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "tool_calls": [odd]}]
    call = CallInput(messages=messages, profile="p")
    assert call.digest() is None
    score = router.score(call)
    assert router.score(call) == score == _reference(mixed_report, featurizer, call)
    assert len(seen) == 2 and len(router._scores) == 0


def test_media_bytes_are_not_hashed_but_what_the_features_read_is(counted, mixed_report, featurizer):
    """An image's data URL is not read by the features (a media part is its type), so two calls that
    differ only in it share the key, and their features: the key of a 4 MB image is not 4 MB hashed.
    A text part, a tool call's arguments or a media part's type are read, and change the key."""
    router, seen = counted

    def call(url: str, text: str = "what is in it?", kind: str = "image_url", args: str = "{}") -> CallInput:
        parts = [{"type": "text", "text": text}, {"type": kind, kind: {"url": url}}]
        turn = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": args}}
        return CallInput(
            messages=[
                {"role": "user", "content": parts},
                {"role": "assistant", "content": None, "tool_calls": [turn]},
                {"role": "tool", "tool_call_id": "c1", "content": "seen"},
            ],
            profile="vision",
        )

    one, two = call("data:image/png;base64," + "A" * 4096), call("data:image/png;base64," + "B" * 4096)
    assert one.digest() == two.digest()
    assert (Featurizer.transform(featurizer, one) == Featurizer.transform(featurizer, two)).all()
    assert router.score(one) == router.score(two) == _reference(mixed_report, featurizer, two)
    assert len(seen) == 1
    others = [call("x", text="what is in that?"), call("x", kind="input_audio"), call("x", args='{"a": 1}')]
    assert len({c.digest() for c in others} | {one.digest()}) == 4
