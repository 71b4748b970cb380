"""Self-consistency keys long answers by their words, not their parsed JSON (issue 37, class 1; h37's
probe).

A best-of-n student with ``min_votes`` groups its passing answers by ``votes.answer_key`` in the serving
process. The key parsed each answer's JSON and normalised every value in Python: a 1 MB answer of
400,000 numbers took 260-320 ms of CPU per passing sample, so a caller asking for long answers (its
``max_tokens`` may reach 1,048,576) held the event loop for about a second per call of three samples.
Past ``MAX_PARSED_CHARS`` an answer is now compared as its words: a few milliseconds per megabyte.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.call.votes import MAX_PARSED_CHARS, answer_key
from routing.models import Backend, TaskProfile
from tests.factories import TaskProfileFactory
from tests.support.liveness import models_keep_answering

BIG = json.dumps({"values": [0] * 400_000}, separators=(",", ":"))


def test_a_megabyte_answer_is_keyed_in_milliseconds_and_still_agrees():
    assert len(BIG) > MAX_PARSED_CHARS
    started = time.thread_time()
    key = answer_key({"role": "assistant", "content": BIG})
    took = time.thread_time() - started
    assert took < 0.05, f"keying took {took * 1000:.0f} ms"
    spaced = "\n  " + BIG.upper() + " \n"  # the same words, spaced and cased differently
    assert answer_key({"role": "assistant", "content": spaced}) == key
    assert answer_key({"role": "assistant", "content": BIG[:-2] + "1]}"}) != key


def test_long_tool_calls_agree_whatever_their_ids():
    arguments = json.dumps({"x": list(range(20_000))})
    one, two = (
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": ident, "type": "function", "function": {"name": "f", "arguments": arguments}}]}
        for ident in ("call_1", "call_2")
    )  # fmt: skip
    assert answer_key(one) == answer_key(two)


def test_short_answers_keep_their_json_comparison():
    assert answer_key({"content": '{"a": 5}'}) == answer_key({"content": '{ "a" : 5.0 }'})


@pytest.mark.django_db(transaction=True)
def test_megabyte_samples_leave_the_gateway_live(gateway_url, backends, api_key, stub):
    Backend.objects.filter(pk=backends["student"].pk).update(samples=3, min_votes=2)
    TaskProfileFactory.create(
        name="extract",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "json_schema", "schema": {"type": "object"}},
    )
    stub.responder = lambda body: Reply(samples=[BIG] * 3) if body["model"] == "student-model" else Reply()
    headers = {"Authorization": f"Bearer {api_key.raw}", "X-Skillgate-Task": "extract"}
    body = {"model": "auto", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1_000_000}

    def ask(_: int) -> httpx.Response:
        return httpx.post(f"{gateway_url}/v1/chat/completions", json=body, headers=headers, timeout=120)

    with models_keep_answering(gateway_url, api_key.raw), ThreadPoolExecutor(3) as threads:
        responses = list(threads.map(ask, range(3)))
    assert [r.status_code for r in responses] == [200] * 3, responses[0].text[:300]
    assert [r.headers["x-skillgate-served-by"] for r in responses] == ["student"] * 3
