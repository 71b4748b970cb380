"""The student served by a real vLLM (CPU backend) with LoRA adapters, reached through litellm.

The session's shared server (tests/support/vllm_shared.py: start-up 40-90 s on 2 cores), which loaded
``student-v1`` at start-up. Needs the ml extra (``infra/install_ml.sh``); skipped otherwise. The gateway
tests drive the running server with the openai SDK and the student backend pointed at this vLLM. Run
alone with

    .venv/bin/pytest tests/routing/test_vllm_student.py
"""

from __future__ import annotations

import asyncio
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench.support.vllm import VllmServer, pid_alive, vllm_available
from tests.support.vllm_shared import STARTUP_ADAPTER, STARTUP_REPLY

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        not vllm_available(), reason="vLLM is not installed in this venv (run infra/install_ml.sh)"
    ),
]

STUDENT = STARTUP_ADAPTER  # loaded at the server's start-up (lora_modules)
STUDENT_REPLY = STARTUP_REPLY
SECOND = "student-v2"
SECOND_REPLY = "print(42)"
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def adapters() -> dict[str, Path]:
    from bench.support.tiny_model import tiny_lora_dir

    return {
        STUDENT: tiny_lora_dir(name=STUDENT, reply=STUDENT_REPLY),
        SECOND: tiny_lora_dir(name=SECOND, reply=SECOND_REPLY),
    }


@pytest.fixture(scope="module")
def server(vllm_server: VllmServer, adapters: dict[str, Path]) -> VllmServer:
    assert vllm_server.lora_modules == {STUDENT: adapters[STUDENT]}  # what it loaded at start-up
    return vllm_server


def _completion(server: VllmServer, model: str, **kwargs: Any) -> Any:
    import litellm

    litellm.suppress_debug_info = True
    return asyncio.run(
        litellm.acompletion(
            model=f"hosted_vllm/{model}",
            api_base=server.base_url,
            api_key="none",
            messages=MESSAGES,
            max_tokens=8,
            temperature=0,
            **kwargs,
        )
    )


def test_student_adapter_answers_through_litellm(server: VllmServer) -> None:
    assert STUDENT in server.models()
    response = _completion(server, STUDENT)
    # The adapter was trained to give this answer: vLLM really applies it.
    assert response.choices[0].message.content == STUDENT_REPLY
    assert response.choices[0].finish_reason == "stop"
    assert response.usage.prompt_tokens > 0
    assert response.usage.completion_tokens > 0
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


def test_base_model_answers_differently(server: VllmServer) -> None:
    response = _completion(server, "tiny-base")
    assert response.choices[0].message.content != STUDENT_REPLY
    assert response.usage.completion_tokens > 0


def test_streaming_yields_chunks_and_final_usage(server: VllmServer) -> None:
    async def collect() -> tuple[str, list[Any]]:
        import litellm

        stream = await litellm.acompletion(
            model=f"hosted_vllm/{STUDENT}",
            api_base=server.base_url,
            api_key="none",
            messages=MESSAGES,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, chunks = "", []
        async for chunk in stream:
            chunks.append(chunk)
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        return text, chunks

    text, chunks = asyncio.run(collect())
    assert len(chunks) > 1
    assert text == STUDENT_REPLY
    usages = [getattr(chunk, "usage", None) for chunk in chunks]
    final = next(u for u in reversed(usages) if u is not None)
    assert final.prompt_tokens > 0
    assert final.completion_tokens > 0


def test_runtime_load_and_unload_adapter(server: VllmServer, adapters: dict[str, Path]) -> None:
    assert SECOND not in server.models()
    server.load_lora(SECOND, adapters[SECOND])
    try:
        assert SECOND in server.models()
        response = _completion(server, SECOND)
        assert response.choices[0].message.content == SECOND_REPLY
        # The first adapter is still served as before.
        assert _completion(server, STUDENT).choices[0].message.content == STUDENT_REPLY
    finally:
        server.unload_lora(SECOND)
    assert SECOND not in server.models()
    assert STUDENT in server.models()


def _gateway_student(server: VllmServer) -> None:
    """Point the test student backend at this vLLM, with the adapter as its model name."""
    from routing.models import Backend

    Backend.objects.filter(name="student").update(
        model="hosted_vllm/tiny-base", adapter=STUDENT, api_base=server.base_url
    )


OK_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
CITY_SCHEMA = {"type": "object", "required": ["city"]}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stream", [False, True])
def test_gateway_serves_a_verified_student_answer_from_vllm(
    server: VllmServer, gateway_url: str, backends: Any, api_key: Any, stub: Any, stream: bool
) -> None:
    import openai

    from routing.models import Invocation
    from tests.factories import TaskProfileFactory

    _gateway_student(server)
    TaskProfileFactory.create(name="ok-json", verifier={"kind": "json_schema", "schema": OK_SCHEMA})
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=api_key.raw, max_retries=0)
    kwargs: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    with client.chat.completions.with_streaming_response.create(
        model="auto", messages=MESSAGES, max_tokens=8, temperature=0, metadata={"task": "ok-json"}, **kwargs
    ) as raw:
        assert raw.headers["x-skillgate-served-by"] == "student"
        assert raw.headers["x-skillgate-verdict"] == "pass"
        parsed = raw.parse()
        if stream:
            text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
        else:
            text = parsed.choices[0].message.content or ""
    assert text == STUDENT_REPLY
    assert stub.requests == []  # the teacher was never asked
    row = Invocation.objects.get()
    (leg,) = row.legs
    assert (leg["role"], leg["model"], leg["verdict"]) == ("student", f"hosted_vllm/{STUDENT}", "pass")
    assert leg["prompt_tokens"] > 0 and row.cost_usd > 0


@pytest.mark.django_db(transaction=True)
def test_gateway_falls_back_when_the_vllm_student_fails_the_schema(
    server: VllmServer, gateway_url: str, backends: Any, api_key: Any, stub: Any
) -> None:
    import openai

    from bench.support.openai_stub import Reply
    from routing.models import Invocation
    from tests.factories import TaskProfileFactory

    _gateway_student(server)
    TaskProfileFactory.create(name="city", verifier={"kind": "json_schema", "schema": CITY_SCHEMA})
    stub.responder = lambda body: Reply(content='{"city": "Paris"}')
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=api_key.raw, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES, max_tokens=8, temperature=0, metadata={"task": "city"}
    )
    assert raw.parse().choices[0].message.content == '{"city": "Paris"}'
    assert raw.headers["x-skillgate-fallback"] == "true"
    row = Invocation.objects.get()
    student, teacher = row.legs
    assert student["verdict"] == "fail" and "city" in student["detail"]
    assert Decimal(student["cost_usd"]) > 0 and Decimal(teacher["cost_usd"]) > 0
    assert row.cost_usd == Decimal(student["cost_usd"]) + Decimal(teacher["cost_usd"])


def test_stopping_leaves_no_vllm_process(server: VllmServer) -> None:
    """Runs last: stops the shared server (a later user would start a fresh one) and checks the group."""
    pids = server.running_pids()
    assert len(pids) >= 2, f"expected the API server and its engine processes, saw {pids}"
    assert server.rss_bytes() > 0
    server.stop()
    assert server.running_pids() == []
    leftovers = [pid for pid in server.seen_pids if pid_alive(pid)]
    assert leftovers == [], f"vLLM processes left running: {leftovers}"
    # Cross-check with ps: nothing but (transient) zombies may remain in the server's process group.
    ps = subprocess.run(["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True, text=True, check=True)
    in_group = [line for line in ps.stdout.splitlines() if line.split()[1] == str(server.pgid)]
    assert [line for line in in_group if not line.split()[2].startswith("Z")] == [], in_group
