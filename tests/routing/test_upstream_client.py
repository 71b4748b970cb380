"""The direct client (routing/call/openai_client.py): OpenAI-protocol backends called without litellm, through
one pooled aiohttp session per event loop (routing/call/http/), against the local stub: what the stub
receives, whole and streamed answers, best-of-n, every kind of failure, and hanging up on a stream the
client no longer reads."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
import orjson
import pytest
from aiohttp import web
from django.conf import settings
from django.test import override_settings

from bench.support.openai_stub import OpenAIStub, Reply
from bench.support.vllm import free_port
from routing.call import openai_client, upstream
from routing.call.http import pool
from routing.call.openai_client import IdSwap, target_of
from routing.errors import UpstreamError
from routing.models import Backend, Invocation
from tests.support.gateway import stream_and_hang_up
from tests.support.wait import wait_until

HELLO = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}


def backend(base_url: str, model: str = "openai/teacher-model", **kw: Any) -> Backend:
    fields: dict[str, Any] = {"name": "teacher", "role": Backend.Role.TEACHER, "timeout_s": 5.0, **kw}
    return Backend(model=model, api_base=base_url, **fields)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def collect(stream: upstream.UpstreamStream) -> list[dict[str, Any]]:
    return [chunk async for chunk in stream]


@dataclass
class HangUpStub(OpenAIStub):
    """The stub, noting how each call's handler ended: the whole answer sent, or the client gone."""

    outcomes: list[str] = field(default_factory=list)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            response = await super()._chat(request)
        except (ConnectionError, asyncio.CancelledError):
            self.outcomes.append("client gone")
            raise
        self.outcomes.append("sent whole")
        return response


@pytest.fixture(autouse=True)
def _fresh_authorizations(stub: OpenAIStub) -> None:
    stub.authorizations.clear()  # the shared stub's fixture resets its requests only


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_client, "_retry_delay", lambda response, retries_done: 0.0)


# --- which backends go direct --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "api_base", "adapter", "direct_model"),
    [
        ("openai/teacher-model", "http://h/v1", "", "teacher-model"),
        ("openai/gpt-4o-mini", "", "", "gpt-4o-mini"),
        ("hosted_vllm/base", "http://h/v1", "", "base"),
        ("hosted_vllm/base", "http://h/v1", "student-v2", "student-v2"),
        ("hosted_vllm/Qwen/Qwen2.5-0.5B", "http://h/v1", "", "Qwen/Qwen2.5-0.5B"),
        ("openai/o3-mini", "", "", None),  # litellm rewrites its parameters (max_completion_tokens)
        ("openai/gpt-5-mini", "", "", None),
        ("openai/gpt-4o-audio-preview", "", "", None),
        ("anthropic/claude-sonnet-4-5", "", "", None),  # needs litellm's translation
        ("gemini/gemini-2.5-flash", "", "", None),
        ("gpt-4o-mini", "", "", None),  # no provider prefix: litellm infers it
        ("hosted_vllm/base", "", "", None),  # litellm would read HOSTED_VLLM_API_BASE
    ],
)
def test_which_backends_the_direct_client_takes(model, api_base, adapter, direct_model):
    found = target_of(backend(api_base, model, adapter=adapter))
    assert (found.model if found else None) == direct_model
    if found is not None:
        assert found.url == (api_base or "https://api.openai.com/v1") + "/chat/completions"


def test_the_setting_sends_everything_through_litellm():
    with override_settings(SKILLGATE={**settings.SKILLGATE, "DIRECT_CLIENT": False}):
        assert target_of(backend("http://h/v1")) is None
    assert target_of(backend("http://h/v1")) is not None


# --- whole answers -------------------------------------------------------------------------------


def test_a_whole_answer_and_the_body_upstream_receives(stub, monkeypatch):
    monkeypatch.setenv("SKILLGATE_TEST_TEACHER_KEY", "sk-test-123")
    call = {"id": "c1", "type": "function", "function": {"name": "scale", "arguments": '{"n": 3}'}}
    stub.responder = lambda body: Reply(content="done", tool_calls=[call], cached_tokens=2)
    tools = [{"type": "function", "function": {"name": "scale", "parameters": {"type": "object"}}}]
    body = {**HELLO, "tools": tools, "temperature": 0.2, "seed": 7, "user": "u-1", "verbosity": "low"}
    done = run(upstream.complete(backend(stub.base_url, api_key_env="SKILLGATE_TEST_TEACHER_KEY"), body))
    # The provider prefix is stripped; litellm's drops (user for a non-OpenAI model, verbosity) kept.
    assert stub.requests == [
        {"model": "teacher-model", "messages": HELLO["messages"], "max_tokens": 16, "tools": tools,
         "temperature": 0.2, "seed": 7}
    ]  # fmt: skip
    assert stub.authorizations == ["Bearer sk-test-123"]
    assert done.message == {"role": "assistant", "content": "done", "tool_calls": [call]}
    assert done.finish_reason == "tool_calls" and len(done.choices) == 1
    assert (done.usage.prompt_tokens, done.usage.cached_tokens) == (4, 2) and done.usage.completion_tokens > 0
    assert done.raw["usage"]["total_tokens"] > 0 and done.latency_ms > 0


def test_no_key_variable_sends_none_and_vllm_gets_its_adapter(stub):
    student = backend(stub.base_url, "hosted_vllm/base", adapter="student-v2", role=Backend.Role.STUDENT)
    run(upstream.complete(student, HELLO))
    assert stub.requests[0]["model"] == "student-v2" and stub.authorizations == ["Bearer none"]


def test_best_of_n_returns_every_answer(stub):
    stub.responder = lambda body: Reply(samples=["a", "b", "c"])
    done = run(upstream.complete(backend(stub.base_url), {**HELLO, "n": 3, "temperature": 0.8}))
    assert stub.requests[0]["n"] == 3
    assert [message["content"] for message, _ in done.choices] == ["a", "b", "c"]
    assert done.pick(2).message["content"] == "c" and done.message["content"] == "a"


def test_a_stray_body_key_is_refused_before_any_call(stub):
    with pytest.raises(ValueError, match="api_base"):
        run(upstream.complete(backend(stub.base_url), {**HELLO, "api_base": "http://evil"}))
    with pytest.raises(ValueError, match="mock_response"):
        run(upstream.open_stream(backend(stub.base_url), {**HELLO, "mock_response": "x"}))
    assert stub.requests == []


def test_one_pooled_client_per_event_loop(stub):
    async def two_calls() -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
        await upstream.complete(backend(stub.base_url), HELLO)
        first = openai_client.client()
        await upstream.complete(backend(stub.base_url), HELLO)
        return first, openai_client.client()

    first, second = run(two_calls())
    assert first is second  # the connection was kept alive between the calls
    assert first.closed  # asyncio.run closed it with its loop (no unclosed session left behind)
    other, _ = run(two_calls())
    assert other is not first and all(held.session is not first for held in pool._sessions.values())


# --- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 503])
def test_an_http_error_is_a_502_naming_the_backend_and_status(stub, no_backoff, status):
    stub.responder = lambda body: Reply(status=status, error="provider exploded")
    with pytest.raises(UpstreamError) as caught:
        run(upstream.complete(backend(stub.base_url, "hosted_vllm/student-model", name="st"), HELLO))
    assert caught.value.status == 502 and caught.value.code == "upstream_error"
    assert caught.value.message == f"The teacher backend 'st' failed ({status}): provider exploded"
    assert len(stub.requests) == 1  # vLLM backends were never retried (a student down falls back)


def test_openai_backends_retry_as_the_openai_sdk_did(stub, no_backoff):
    answers = iter([Reply(status=503, error="busy"), Reply(status=429, error="slow down"), Reply()])
    stub.responder = lambda body: next(answers)
    assert run(upstream.complete(backend(stub.base_url), HELLO)).message["content"] == "ok"
    assert len(stub.requests) == 3
    stub.requests.clear()
    stub.responder = lambda body: Reply(status=400, error="bad")
    with pytest.raises(UpstreamError, match=r"failed \(400\): bad"):
        run(upstream.complete(backend(stub.base_url), HELLO))
    assert len(stub.requests) == 1  # a 400 is final


def test_a_timeout_is_a_504(stub):
    stub.responder = lambda body: Reply(delay_s=30)
    started = time.perf_counter()
    with pytest.raises(UpstreamError) as caught:
        run(upstream.complete(backend(stub.base_url, "hosted_vllm/m", timeout_s=0.3), HELLO))
    assert caught.value.status == 504 and caught.value.code == "upstream_timeout"
    assert caught.value.message.startswith("The teacher backend 'teacher' timed out: ReadTimeout")
    assert time.perf_counter() - started < 15  # the 0.3 s timeout, not the 30 s answer (room for load)


def test_connection_refused_is_a_502(no_backoff):
    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    for model in ("hosted_vllm/m", "openai/m"):
        with pytest.raises(UpstreamError) as caught:
            run(upstream.complete(backend(nowhere, model, role=Backend.Role.STUDENT, name="s"), HELLO))
        assert caught.value.status == 502
        assert caught.value.message.startswith("The student backend 's' failed (ConnectError): ")


def test_an_api_base_that_is_not_a_url_is_a_502():
    with pytest.raises(UpstreamError, match=r"failed \(UnsupportedProtocol\)"):
        run(upstream.complete(backend("127.0.0.1:9/v1", "hosted_vllm/m"), HELLO))


def test_an_answer_that_is_not_a_completion_is_a_502():
    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="<html>gateway</html>")

    class Garbage(OpenAIStub):
        def app(self) -> web.Application:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", garbage)
            return app

    with Garbage() as server, pytest.raises(UpstreamError, match=r"failed \(200\): not a JSON answer"):
        run(upstream.complete(backend(server.base_url, "hosted_vllm/m"), HELLO))


# --- streams -------------------------------------------------------------------------------------


def test_a_stream_passes_the_upstreams_events_through(stub):
    stub.responder = lambda body: Reply(content="one two three")

    async def events() -> list[tuple[dict[str, Any], bytes | None]]:
        stream = await upstream.open_stream(backend(stub.base_url), HELLO)
        return [event async for event in stream.events()]

    got = run(events())
    assert stub.requests[0]["stream"] is True
    assert stub.requests[0]["stream_options"] == {"include_usage": True}
    assert stub.requests[0]["model"] == "teacher-model"
    chunks = [chunk for chunk, _ in got]
    assert all(orjson.loads(data) == chunk for chunk, data in got if data is not None)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]).split() == [
        "one",
        "two",
        "three",
    ]
    assert chunks[-1]["usage"]["completion_tokens"] > 0 and chunks[-1]["choices"] == []


def test_a_stream_that_fails_before_its_first_event_raises_at_open(stub):
    stub.responder = lambda body: Reply(status=503, error="overloaded")
    with pytest.raises(UpstreamError, match=r"failed \(503\): overloaded") as caught:
        run(upstream.open_stream(backend(stub.base_url, "hosted_vllm/m"), HELLO))
    assert caught.value.status == 502


def _sse_server(body: bytes) -> OpenAIStub:
    """A server that answers every stream with ``body`` as it is (framing, errors, comments)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in (body[i : i + 7] for i in range(0, len(body), 7)):  # split mid-line on purpose
            await response.write(piece)
        await response.write_eof()
        return response

    class Raw(OpenAIStub):
        def app(self) -> web.Application:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", answer)
            return app

    return Raw()


def test_sse_framing_comments_crlf_and_an_error_event():
    chunk = {"id": "x-1", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    data = orjson.dumps(chunk)
    body = b": keep-alive\r\n\r\nevent: message\r\ndata: " + data + b"\r\n\r\ndata:" + data + b"\n\n"
    body += b'data: {"error": {"message": "engine died", "code": 500}}\n\n'
    with _sse_server(body) as server:

        async def read() -> tuple[list[dict[str, Any]], UpstreamError | None]:
            got: list[dict[str, Any]] = []
            try:
                async for item in await upstream.open_stream(
                    backend(server.base_url, "hosted_vllm/m"), HELLO
                ):
                    got.append(item)
            except UpstreamError as exc:
                return got, exc
            return got, None

        got, error = run(read())
    assert got == [chunk, chunk]
    assert error is not None and error.message == "The teacher backend 'teacher' failed (500): engine died"


def test_a_stream_ends_at_done_even_without_a_blank_line():
    data = orjson.dumps({"id": "x", "choices": []})
    with _sse_server(b"data: " + data + b"\n\ndata: [DONE]") as server:
        got = run(collect_from(backend(server.base_url, "hosted_vllm/m")))
    assert got == [{"id": "x", "choices": []}]


async def collect_from(target: Backend) -> list[dict[str, Any]]:
    return await collect(await upstream.open_stream(target, HELLO))


@pytest.fixture
def hang_up_stub() -> Iterator[HangUpStub]:
    with HangUpStub(responder=lambda body: Reply(content=" ".join(["word"] * 400), chunk_delay_s=0.05)) as s:
        yield s


def test_closing_a_stream_hangs_up_on_the_upstream(hang_up_stub):
    async def read_two_then_close() -> float:
        stream = await upstream.open_stream(backend(hang_up_stub.base_url, "hosted_vllm/m"), HELLO)
        pieces: AsyncIterator[dict[str, Any]] = aiter(stream)
        await anext(pieces)
        await anext(pieces)
        await stream.aclose()
        return time.perf_counter()

    closed = run(read_two_then_close())
    wait_until(lambda: hang_up_stub.outcomes, timeout=5, what="the stub's handler to end")
    assert hang_up_stub.outcomes == ["client gone"]
    assert time.perf_counter() - closed < 10  # not after the whole 20 s answer (room for a loaded machine)


def test_id_swap_only_where_it_is_safe():
    ids = IdSwap("chatcmpl-ours")
    data = b'{"id": "up-1", "choices": [{"delta": {"content": "the id is \\"up-1\\""}}]}'
    assert ids.swap(data, "up-1") == data.replace(b'"up-1",', b'"chatcmpl-ours",')
    assert ids.swap(b'{"id":"up-1","model":"up-1"}', "up-1") is None  # twice: rebuild instead
    assert ids.swap(b'{"id":"a\\"b"}', 'a"b') is None  # not a plain token
    tail = b'{"id":"up-1","choices":[{"delta":{"content":"say \\"up-1"}}]}'  # a string ending in it
    assert ids.swap(tail, "up-1") is None
    assert ids.swap(b'{"choices":[]}', None) is None


# --- through the gateway -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_client_hanging_up_mid_stream_hangs_up_upstream_too(gateway_url, backends, api_key, hang_up_stub):
    Backend.objects.update(api_base=hang_up_stub.base_url)
    stream_and_hang_up(gateway_url, api_key.raw)
    wait_until(lambda: hang_up_stub.outcomes, timeout=5, what="the upstream to see the hang-up")
    assert hang_up_stub.outcomes == ["client gone"]
    wait_until(Invocation.objects.exists, timeout=10, what="the ledger row")
    (leg,) = Invocation.objects.get().legs
    assert leg["usage_estimated"] and leg["completion_tokens"] > 0


@pytest.mark.django_db(transaction=True)
def test_the_gateway_streams_the_upstreams_bytes_with_its_own_id(gateway_url, backends, api_key, stub):
    stub.responder = lambda body: Reply(content="a b c")
    resp = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json={"model": "auto", "messages": HELLO["messages"], "stream": True},
        headers={"Authorization": f"Bearer {api_key.raw}"},
        timeout=30,
    )
    events = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    row = Invocation.objects.get()
    assert {c["id"] for c in chunks} == {f"chatcmpl-{row.id.hex}"}
    assert all("usage" not in c for c in chunks)  # not asked for: the usage chunk is held back
    assert '"id": "chatcmpl-' in events[0]  # the stub's own formatting: passed through, not rebuilt
    assert row.response["message"]["content"].split() == ["a", "b", "c"] and row.prompt_tokens > 0


def test_litellm_is_never_imported_for_an_openai_protocol_backend(stub):
    script = f"""
import asyncio, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "app.settings")
import django
django.setup()
import app.asgi
from routing.call import upstream
from routing.models import Backend
backend = Backend(name="t", role="teacher", model="openai/teacher-model", api_base={stub.base_url!r})
body = {HELLO!r}
async def main():
    await upstream.complete(backend, body)
    async for _ in await upstream.open_stream(backend, body):
        pass
asyncio.run(main())
print("litellm" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr
