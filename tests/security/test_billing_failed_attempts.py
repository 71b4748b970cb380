"""Failed attempts are never billed $0 (issue 37, class 3, round three's probes).

Every attempt that reached the provider (student or teacher) is priced and ledgered, whatever became
of it: the client hung up mid-stream (on each of the three streaming APIs), the upstream cut its
stream, the upstream stalled past the backend's timeout after part of its answer, or the student's
answer failed its verifier (or came without a usage, or timed out) and the teacher answered instead.
The local stub speaks OpenAI's protocol (JSON and SSE) as a provider does; each test checks the
ledger row against what the stub was sent, and that a concurrent ``GET /v1/models`` kept answering.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from bench.support.openai_stub import OpenAIStub, Reply
from routing.budgets import to_cents
from routing.ledger import writer
from routing.models import ApiKey, Backend, Invocation, TaskProfile
from routing.pricing import attempt_bound, prices_for
from routing.protocol import ChatRequest
from tests.factories import BackendFactory, TaskProfileFactory, make_key
from tests.support.gateway import STUDENT_PRICES, TEACHER_PRICES, client
from tests.support.liveness import models_keep_answering
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
MAX_TOKENS = 50
TIMEOUT_S = 0.5
WORDS = " ".join(["word"] * 40)
PROFILE = "checked"


def bound(backend: Backend, *, task: str | None = None) -> Decimal:
    """The worst case of one attempt of the chat call these tests send, on ``backend`` (streamed or
    not: the stream flags are not prompt)."""
    request: dict[str, Any] = {"model": "auto", "messages": HELLO, "max_tokens": MAX_TOKENS}
    if task is not None:
        request["metadata"] = {"task": task}
    body = ChatRequest.model_validate(request).upstream_body(max_tokens=MAX_TOKENS)
    return attempt_bound(prices_for(backend), body, max_tokens=MAX_TOKENS)


def usage_cost(backend: Backend, prompt: int, completion: int) -> Decimal:
    assert backend.input_cost_per_token is not None and backend.output_cost_per_token is not None
    return prompt * backend.input_cost_per_token + completion * backend.output_cost_per_token


def by_role(student: Reply, teacher: Reply) -> Callable[[dict[str, Any]], Reply]:
    return lambda body: student if "student" in str(body["model"]) else teacher


def row() -> Invocation:
    found = wait_until(lambda: Invocation.objects.first(), timeout=20, what="the ledger row")
    assert found is not None
    return found


def warm_up(url: str) -> None:
    """One ordinary call first: a fresh server's first call through litellm imports it (seconds under
    the GIL), which is start-up, not the attack the liveness probe measures."""
    warm = make_key()
    client(url, warm.raw).chat.completions.create(model="auto", messages=HELLO)  # type: ignore[arg-type]
    wait_until(lambda: Invocation.objects.exists(), timeout=20, what="the warm-up's row")
    Invocation.objects.all().delete()


def checked_profile() -> TaskProfile:
    """A profile that routes to the student and checks its answer: only ``ok`` passes."""
    return TaskProfileFactory.create(
        name=PROFILE,
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier={"kind": "regex", "pattern": "^ok$"},
    )


def hang_up_after_words(url: str, key: str, path: str, body: dict[str, Any]) -> None:
    """Streams ``body`` to ``path`` and hangs up as soon as the first of the answer's words arrives."""
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "anthropic-version": "2023-06-01"}
    with httpx.stream("POST", f"{url}{path}", json=body, headers=headers, timeout=30) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if "word" in line:
                return
    raise AssertionError("no word of the answer arrived before the stream ended")


STREAMS = {
    "chat": ("/v1/chat/completions", {"model": "auto", "messages": HELLO, "max_tokens": MAX_TOKENS}),
    "messages": ("/v1/messages", {"model": "auto", "messages": HELLO, "max_tokens": MAX_TOKENS}),
    "responses": ("/v1/responses", {"model": "auto", "input": "hi", "max_output_tokens": MAX_TOKENS}),
}


@pytest.mark.parametrize("api", sorted(STREAMS))
def test_a_client_that_hangs_up_mid_stream_is_charged_on_every_api(gateway_url, backends, stub, api):
    stub.responder = lambda body: Reply(content=WORDS, chunk_delay_s=0.05)
    pair = make_key()
    path, body = STREAMS[api]
    with models_keep_answering(gateway_url, pair.raw):
        hang_up_after_words(gateway_url, pair.raw, path, {**body, "stream": True})
    call = row()
    (leg,) = call.legs
    assert leg["usage_estimated"] and leg["cost_basis"] == "bound" and call.cost_basis == "bound"
    assert call.cost_usd > 0 and Decimal(leg["cost_usd"]) == call.cost_usd
    assert len(stub.requests) == 1
    writer.drain()
    assert ApiKey.objects.get(pk=pair.key.pk).spent_usd == call.cost_usd


@pytest.mark.parametrize("direct", [True, False], ids=["direct-client", "litellm"])
def test_an_upstream_that_stalls_after_part_of_its_stream_is_charged_its_bound(
    gateway_url, backends, stub, settings, direct
):
    settings.SKILLGATE = {**settings.SKILLGATE, "DIRECT_CLIENT": direct}
    teacher = backends["teacher"]
    warm_up(gateway_url)
    Backend.objects.filter(pk=teacher.pk).update(timeout_s=TIMEOUT_S)
    stub.responder = lambda body: Reply(content=WORDS, chunk_delay_s=TIMEOUT_S * 6)  # one word, then silence
    pair = make_key()
    got: list[str] = []
    with models_keep_answering(gateway_url, pair.raw), pytest.raises(openai.APIError):
        for chunk in client(gateway_url, pair.raw).chat.completions.create(
            model="auto",
            messages=HELLO,  # type: ignore[arg-type]
            max_tokens=MAX_TOKENS,
            stream=True,
            timeout=30,
        ):
            got += [choice.delta.content for choice in chunk.choices if choice.delta.content]
    assert "".join(got).strip() == "word"  # part of the answer arrived, then the upstream stalled
    call = row()
    (leg,) = call.legs
    assert leg["usage_estimated"] and call.cost_basis == "bound"
    assert call.cost_usd == to_cents(bound(teacher)) > 0
    assert leg["completion_tokens"] >= 1  # what did arrive is counted locally


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_student_answer_that_fails_its_verifier_is_billed_with_the_teachers(
    gateway_url, backends, stub, stream
):
    checked_profile()
    stub.responder = by_role(student=Reply(content="not ok at all"), teacher=Reply(content="ok"))
    pair = make_key()
    answer = client(gateway_url, pair.raw).chat.completions.create(
        model="auto",
        messages=HELLO,  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS,
        metadata={"task": PROFILE},
        stream=stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),  # type: ignore[arg-type]
    )
    if stream:
        list(answer)  # type: ignore[arg-type]
    call = row()
    student_leg, teacher_leg = call.legs
    assert (student_leg["role"], student_leg["verdict"]) == ("student", "fail") and call.fallback
    for leg, backend in ((student_leg, backends["student"]), (teacher_leg, backends["teacher"])):
        assert leg["cost_basis"] == "usage" and leg["prompt_tokens"] > 0 and leg["completion_tokens"] > 0
        assert Decimal(leg["cost_usd"]) == usage_cost(backend, leg["prompt_tokens"], leg["completion_tokens"])
    assert call.cost_usd == Decimal(student_leg["cost_usd"]) + Decimal(teacher_leg["cost_usd"])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_student_that_times_out_before_the_teacher_answers_is_charged_every_attempt(
    gateway_url, backends, stub, stream
):
    checked_profile()
    student = backends["student"]
    Backend.objects.filter(pk=student.pk).update(timeout_s=TIMEOUT_S)
    stub.responder = by_role(student=Reply(content="ok", delay_s=TIMEOUT_S * 5), teacher=Reply(content="ok"))
    pair = make_key()
    with models_keep_answering(gateway_url, pair.raw):
        answer = client(gateway_url, pair.raw).chat.completions.create(
            model="auto",
            messages=HELLO,  # type: ignore[arg-type]
            max_tokens=MAX_TOKENS,
            metadata={"task": PROFILE},
            stream=stream,
            timeout=60,
        )
        if stream:
            list(answer)  # type: ignore[arg-type]
    call = row()
    student_leg, teacher_leg = call.legs
    sent_to_student = sum("student" in r["model"] for r in stub.requests)
    assert sent_to_student == student_leg["attempts"] >= 1 and student_leg["cost_basis"] == "bound"
    assert Decimal(student_leg["cost_usd"]) == to_cents(sent_to_student * bound(student, task=PROFILE))
    assert call.cost_usd == Decimal(student_leg["cost_usd"]) + Decimal(teacher_leg["cost_usd"])


def test_a_client_that_hangs_up_while_the_student_is_verified_is_still_billed(gateway_url, backends, stub):
    """The stream waits for the whole student answer to verify it; the client gives up meanwhile."""
    checked_profile()
    stub.responder = by_role(student=Reply(content="not ok", delay_s=1.0), teacher=Reply(content=WORDS))
    pair = make_key()
    request = {"model": "auto", "messages": HELLO, "max_tokens": MAX_TOKENS, "stream": True}
    request["metadata"] = {"task": PROFILE}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{gateway_url}/v1/chat/completions",
            json=request,
            headers={"Authorization": f"Bearer {pair.raw}"},
            timeout=0.3,
        )
    call = wait_until(lambda: Invocation.objects.first(), timeout=20, what="the ledger row")
    assert call is not None
    assert len(call.legs) >= 1 and call.legs[0]["role"] == "student"
    assert all(Decimal(leg["cost_usd"]) > 0 for leg in call.legs), call.legs
    assert call.cost_usd == sum(Decimal(leg["cost_usd"]) for leg in call.legs) > 0


def test_a_non_streamed_call_the_client_abandons_is_billed(gateway_url, backends, stub):
    stub.responder = lambda body: Reply(content="ok", delay_s=1.0)
    pair = make_key()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{gateway_url}/v1/chat/completions",
            json={"model": "auto", "messages": HELLO, "max_tokens": MAX_TOKENS},
            headers={"Authorization": f"Bearer {pair.raw}"},
            timeout=0.3,
        )
    call = row()
    (leg,) = call.legs
    assert leg["completion_tokens"] > 0 and call.cost_basis == "usage"
    assert (
        call.cost_usd == usage_cost(backends["teacher"], leg["prompt_tokens"], leg["completion_tokens"]) > 0
    )
    writer.drain()
    assert ApiKey.objects.get(pk=pair.key.pk).spent_usd == call.cost_usd


class UsageFreeStub(OpenAIStub):
    """A provider that answers, and so bills, but says no usage (some self-hosted servers, some
    proxies): its JSON answers carry no ``usage``."""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        response = await super()._chat(request)
        if isinstance(response, web.Response) and response.status == 200 and response.body is not None:
            data = json.loads(bytes(response.body))  # type: ignore[arg-type]
            data.pop("usage", None)
            response.body = json.dumps(data).encode()
        return response


@pytest.fixture
def usage_free(transactional_db: None) -> Iterator[tuple[UsageFreeStub, dict[str, Backend]]]:
    with UsageFreeStub() as stub:
        made = {
            role: BackendFactory.create(
                name=role,
                role=role,
                model=f"openai/{role}-model",
                api_base=stub.base_url,
                input_cost_per_token=prices[0],
                output_cost_per_token=prices[1],
            )
            for role, prices in (("teacher", TEACHER_PRICES), ("student", STUDENT_PRICES))
        }
        yield stub, made


def test_answers_without_usage_are_charged_their_bound_and_counted_locally(gateway_url, usage_free):
    """The student answers without usage and fails its verifier, then the teacher answers without
    usage: both attempts reached the provider, both are charged their worst case, and the tokens of
    what was sent and received are counted here."""
    stub, made = usage_free
    checked_profile()
    stub.responder = by_role(student=Reply(content="not ok"), teacher=Reply(content="ok"))
    pair = make_key()
    answer = client(gateway_url, pair.raw).chat.completions.create(
        model="auto",
        messages=HELLO,  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS,
        metadata={"task": PROFILE},
    )
    assert answer.choices[0].message.content == "ok" and answer.usage is None
    call = row()
    student_leg, teacher_leg = call.legs
    assert student_leg["verdict"] == "fail" and call.fallback and call.cost_basis == "bound"
    for leg, backend, text in (
        (student_leg, made["student"], "not ok"),
        (teacher_leg, made["teacher"], "ok"),
    ):
        assert leg["cost_basis"] == "bound" and leg["usage_estimated"]
        assert Decimal(leg["cost_usd"]) == to_cents(bound(backend, task=PROFILE)) > 0
        assert leg["prompt_tokens"] > 0 and leg["completion_tokens"] >= len(text)  # a token per byte at most
    assert call.cost_usd == Decimal(student_leg["cost_usd"]) + Decimal(teacher_leg["cost_usd"])
    writer.drain()
    assert ApiKey.objects.get(pk=pair.key.pk).spent_usd == call.cost_usd
