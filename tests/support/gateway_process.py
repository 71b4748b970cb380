"""A real gateway server process for tests: uvicorn serving app.asgi on the test database (or
``python -m app.serve``, what ``make run`` serves: :data:`APP_SERVE`), in its own process group, so a test
can run several, stop one with SIGTERM or kill one with SIGKILL.

Its var/ folder and ledger journals are the test's (``var``, ``journal``); its log goes under the test
artifacts. It reaches the same stub upstream as the test's own server (the backends are rows)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from django.conf import settings

from bench.support.vllm import free_port
from tests.support.celery_worker import LOGS, ROOT, worker_database_url
from tests.support.wait import wait_until

UVICORN = ("-m", "uvicorn", "app.asgi:application", "--host", "127.0.0.1")
APP_SERVE = ("-m", "app.serve")  # the web process of `make run` (manage.py serve), supervisord and the image


@dataclass
class GatewayProcess:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def terminate(self, timeout: float = 60) -> bool:
        """SIGTERM, as a supervisor stops it; whether it stopped cleanly. uvicorn shuts down gracefully,
        then re-raises the signal: a clean stop exits by SIGTERM (-15), with no traceback logged."""
        os.killpg(self.proc.pid, signal.SIGTERM)
        status = self.proc.wait(timeout)
        return status in (0, -signal.SIGTERM) and "Traceback" not in self.tail()

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def journal_files(folder: Path) -> list[Path]:
    """The ledger journal segments under a journal folder (one subfolder per database)."""
    return sorted(folder.glob("*/*.jsonl"))


@contextlib.contextmanager
def gateway_process(
    name: str,
    folder: Path,
    env: dict[str, str] | None = None,
    *,
    serve: Sequence[str] = UVICORN,
    preexec_fn: Callable[[], None] | None = None,
) -> Iterator[GatewayProcess]:
    """A started server (``/healthz`` answers); killed afterwards if still running. ``serve``: the
    interpreter's arguments before ``--port``; ``preexec_fn`` runs in the child before it starts."""
    port = free_port()
    log = LOGS / f"{name}-gateway.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "SKILLGATE_VAR_DIR": str(folder / "var"),
        "SKILLGATE_LEDGER_JOURNAL_DIR": str(folder / "journal"),
        **(env or {}),
    }
    command = [sys.executable, *serve, "--port", str(port), "--log-level", "warning"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=full_env,
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec_fn,
        )
    server = GatewayProcess(proc, f"http://127.0.0.1:{port}", log)

    def up() -> bool:
        try:
            return httpx.get(f"{server.url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def died() -> str | None:
        return None if proc.poll() is None else f"{name} exited ({proc.returncode}):\n{server.tail()}"

    try:
        wait_until(up, timeout=120, interval=0.2, what=f"the {name} gateway to start", abort=died)
        yield server
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
