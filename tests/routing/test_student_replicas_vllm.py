"""Two real vLLM (CPU) replicas of the student: one is killed and restarted, and the admitted adapter is
served again by both without anyone acting (issue 14 item 5, issue 17 item 4).

"Beat" here is a thread that runs the adapter health check every ``BEAT_S`` seconds, as Celery beat
runs ``student_health_check_all``; the checks calls ask for are run at once, as a worker would. Two
vLLM start-ups of its own besides the session's shared server, the first replica (60-200 s each on a busy
2-core machine: raise SKILLGATE_VLLM_STARTUP_TIMEOUT) and ~1-2 GB of memory each. Run alone, niced:

    nice .venv/bin/pytest -m slow tests/routing/test_student_replicas_vllm.py
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from bench.support.vllm import VllmServer, free_port, vllm_available
from routing.call import replicas
from routing.models import Backend, Invocation
from tests.factories import AdapterFactory, TaskProfileFactory
from tests.support.gateway import client
from tests.support.wait import wait_until
from training import adapter_health
from training.models import Adapter

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (run infra/install_ml.sh)"),
]

ADAPTER = "rep-v1"
REPLY = '{"ok": true}'
BEAT_S = 2.0
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def model_dirs() -> tuple[Path, Path]:
    from bench.support.tiny_model import tiny_lora_dir, tiny_model_dir

    return tiny_model_dir(), tiny_lora_dir(name=ADAPTER, reply=REPLY)


def _server(base: Path, port: int, log_dir: Path) -> VllmServer:
    return VllmServer(base, "tiny-base", port=port, log_dir=log_dir)


@pytest.fixture(scope="module")
def servers(
    vllm_server: VllmServer, model_dirs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[VllmServer]]:
    """The first replica is the session's shared vLLM (tests/support/vllm_shared.py; the adapters this
    module loads into it are unloaded after it); the second, the one killed, is this module's own."""
    base, _ = model_dirs
    assert (vllm_server.model_dir, vllm_server.served_name) == (base, "tiny-base")
    found = [vllm_server, _server(base, free_port(), tmp_path_factory.mktemp("vllm-replicas"))]
    try:
        found[1].start()  # after the first: at once, both engines bind the same core
        yield found
    finally:
        found[1].stop()  # or the restarted one the test put in its place


class Beat:
    """Runs the health check of one backend every BEAT_S seconds until stopped."""

    def __init__(self, backend_id: int) -> None:
        self.backend_id = backend_id
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self.stopped.wait(BEAT_S):
                with contextlib.suppress(Exception):
                    adapter_health.check_backend(self.backend_id)
        finally:
            connections.close_all()

    def __enter__(self) -> Beat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(60)


def _serves(server: VllmServer) -> bool:
    try:
        return ADAPTER in server.models()
    except Exception:
        return False


def _direct(server: VllmServer) -> str:
    import httpx

    body = {"model": ADAPTER, "messages": MESSAGES, "max_tokens": 8, "temperature": 0}
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=60)
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


def _gateway(gateway_url: str, key: str) -> tuple[str, str]:
    raw = client(gateway_url, key).chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES, max_tokens=8, temperature=0, metadata={"task": "rep"}
    )
    return raw.headers["x-skillgate-served-by"], raw.parse().choices[0].message.content or ""


def test_a_killed_and_restarted_replica_serves_the_admitted_adapter_again(
    servers: list[VllmServer],
    model_dirs: tuple[Path, Path],
    gateway_url: str,
    backends: dict[str, Backend],
    api_key: Any,
    stub: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    base, lora = model_dirs
    first, second = servers
    monkeypatch.setenv("LITELLM_OFFLINE_MODE", "true")
    student = backends["student"]
    urls = [first.base_url, second.base_url]
    Backend.objects.filter(pk=student.pk).update(
        model="hosted_vllm/tiny-base", api_base=urls[0], replicas=urls
    )
    profile = TaskProfileFactory.create(name="rep", student_adapter=ADAPTER)
    AdapterFactory.create(profile=profile, name=ADAPTER, path=str(lora), status=Adapter.Status.ACTIVE)
    asked: list[int] = []

    def check_now(backend_id: int | None) -> None:  # a worker running the check a call asked for
        assert backend_id is not None
        asked.append(backend_id)
        try:
            adapter_health.check_backend(backend_id)
        finally:
            connections.close_all()

    monkeypatch.setattr(replicas, "_send_check", check_now)
    replicas.forget()

    with Beat(student.pk):
        # Nobody loads the adapter: beat's first check does, into both.
        wait_until(lambda: _serves(first) and _serves(second), timeout=60, what="beat to load both replicas")
        assert _direct(first) == REPLY and _direct(second) == REPLY
        for _ in range(4):
            assert _gateway(gateway_url, api_key.raw) == ("student", REPLY)

        # Kill -9 the second replica's whole process group, then start it again on the same port.
        assert second.pgid is not None
        os.killpg(second.pgid, signal.SIGKILL)
        second.stop()
        killed_at = time.monotonic()
        during = [_gateway(gateway_url, api_key.raw)[0] for _ in range(4)]
        assert during.count("student") >= 3  # at most the first call met the dead replica
        restarted = _server(base, second.port, tmp_path)
        servers[1] = restarted  # the module fixture stops it
        restarted.start()
        up_at = time.monotonic()
        wait_until(lambda: _serves(restarted), timeout=60, what="beat to reload the restarted replica")
        reloaded_at = time.monotonic()
        assert _direct(restarted) == REPLY and _direct(first) == REPLY
        wait_until(
            lambda: not Backend.objects.get(pk=student.pk).replica_status[restarted.base_url]["missing"],
            timeout=30,
            what="the status to record the reload",
        )
        after = [_gateway(gateway_url, api_key.raw) for _ in range(6)]
    assert after == [("student", REPLY)] * 6
    missing_legs = adapter_health.adapter_missing_legs(
        Invocation.objects.order_by("created_at").first().created_at
    )

    # Beat stopped, an adapter lost behind the status's back: the call that meets it gets vLLM's own 404,
    # its leg is counted as adapter missing, and the check it asks for loads the adapter again.
    asked_before, unloaded_at = len(asked), timezone.now()
    first.unload_lora(ADAPTER)
    lost = [_gateway(gateway_url, api_key.raw)[0] for _ in range(2)]
    assert sorted(lost) == ["student", "teacher"]
    wait_until(lambda: _serves(first), timeout=60, what="the check the call asked for to reload the adapter")
    assert asked[asked_before:] == [student.pk]
    row = Invocation.objects.get(fallback=True, created_at__gte=unloaded_at)
    assert row.legs[0]["error"].startswith("adapter missing:") and first.base_url in row.legs[0]["error"]
    assert adapter_health.adapter_missing_legs(row.created_at) == 1
    assert [_gateway(gateway_url, api_key.raw) for _ in range(2)] == [("student", REPLY)] * 2
    print(
        f"\nvLLM replica recovery: killed -> restarted and answering {up_at - killed_at:.1f} s, "
        f"answering -> adapter reloaded {reloaded_at - up_at:.1f} s, total {reloaded_at - killed_at:.1f} s; "
        f"start-up {restarted.startup_s:.1f} s; calls during the outage {during}; "
        f"adapter-missing legs until then {missing_legs}; the lost adapter's leg: {row.legs[0]['error']!r}"
    )
