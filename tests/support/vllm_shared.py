"""One real vLLM server (CPU) for the whole test session, shared by the test modules that need *a* vLLM
serving the tiny model: tests/routing/test_vllm_student.py, tests/training/test_deploy.py,
tests/training/test_cycle_tiny_model.py and the first replica of tests/routing/test_student_replicas_vllm.py.

A start-up costs 40-100 s on 2 busy cores and each module used to pay it (test_vllm_student twice:
pytest-django runs its database tests before the others, so its module fixture was torn down and set up
again between them). The server serves the tiny base model as ``tiny-base`` with one adapter loaded at
start-up (``STARTUP_ADAPTER``, trained to answer ``STARTUP_REPLY``), which test_vllm_student checks.

Each module gets it through the ``vllm_server`` fixture (tests/conftest.py), which unloads, when the
module ends, every adapter the module loaded: the next module sees the server as it started (adapter
names such as ``city-json-v1`` recur between modules, and vLLM refuses to load a name twice). A module
that stops the server (test_vllm_student's last test) only costs the next user a fresh start-up.
Plain helpers; the fixtures are in tests/conftest.py.
"""

from __future__ import annotations

from pathlib import Path

from bench.support.vllm import VllmError, VllmServer

BASE_NAME = "tiny-base"
STARTUP_ADAPTER = "student-v1"
STARTUP_REPLY = '{"ok": true}'


class SharedVllm:
    """Starts the session's server on first use, and again if a test stopped it or it died."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.server: VllmServer | None = None

    def get(self) -> VllmServer:
        server = self.server
        if server is not None and server.process is not None and server.process.poll() is None:
            return server
        if server is not None:
            server.stop()  # whatever is left of a stopped or dead one
        from bench.support.tiny_model import tiny_lora_dir, tiny_model_dir

        adapter = tiny_lora_dir(name=STARTUP_ADAPTER, reply=STARTUP_REPLY)
        self.server = VllmServer(
            tiny_model_dir(), BASE_NAME, lora_modules={STARTUP_ADAPTER: adapter}, log_dir=self.log_dir
        )
        self.server.start()
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def unload_added(server: VllmServer, at_start: set[str]) -> None:
    """Unloads the adapters loaded since ``at_start`` was read (nothing when the server was stopped); a
    server that cannot is stopped, so that the next module gets a fresh one rather than its leftovers."""
    if server.process is None or server.process.poll() is not None:
        return
    try:
        for name in set(server.models()) - at_start:
            server.unload_lora(name)
    except (OSError, VllmError):
        server.stop()
