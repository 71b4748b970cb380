"""The student served by a real vLLM (CPU backend) with LoRA adapters, reached through litellm.

One server for the whole module (start-up 40-90 s on 2 cores). Needs the ml extra
(``infra/install_ml.sh``); skipped otherwise. No database: run alone with

    .venv/bin/pytest -m vllm -p no:django --noconftest tests/routing/test_vllm_student.py
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.vllm import VllmServer, pid_alive, vllm_available

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        not vllm_available(), reason="vLLM is not installed in this venv (run infra/install_ml.sh)"
    ),
]

STUDENT = "student-v1"
STUDENT_REPLY = '{"ok": true}'
SECOND = "student-v2"
SECOND_REPLY = "print(42)"
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def adapters() -> dict[str, Path]:
    from tests.support.tiny_model import tiny_lora_dir

    return {
        STUDENT: tiny_lora_dir(name="student-v1", reply=STUDENT_REPLY),
        SECOND: tiny_lora_dir(name="student-v2", reply=SECOND_REPLY),
    }


@pytest.fixture(scope="module")
def server(adapters: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    from tests.support.tiny_model import tiny_model_dir

    with (
        pytest.MonkeyPatch.context() as mp,
        VllmServer(
            tiny_model_dir(),
            "tiny-base",
            lora_modules={STUDENT: adapters[STUDENT]},
            log_dir=tmp_path_factory.mktemp("vllm"),
        ) as srv,
    ):
        mp.setenv("LITELLM_OFFLINE_MODE", "true")
        yield srv


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


def test_stopping_leaves_no_vllm_process(server: VllmServer) -> None:
    """Runs last: stops the module's server (the fixture's exit is then a no-op) and checks the group."""
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
