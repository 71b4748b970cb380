"""A real Celery worker for tests: a subprocess on this run's broker, queue(s) and test database.

Its log goes to a file under the test artifacts (kept when a test fails); ``Worker.wait_until`` retries
a check and fails at once with the worker's log when the worker died, or with it at the deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from django.conf import settings
from django.db import connection

from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
LOGS = Path(os.environ.get("SKILLGATE_TEST_ARTIFACTS", str(ROOT / "var" / "test-artifacts")))


def worker_database_url() -> str:
    """The test database as a DATABASE_URL, for processes started by the tests."""
    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{conf['NAME']}"
    auth = conf["USER"] + (f":{conf['PASSWORD']}" if conf["PASSWORD"] else "")
    return f"postgres://{auth}@{conf['HOST'] or '127.0.0.1'}:{conf['PORT'] or 5432}/{conf['NAME']}"


class Worker:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def wait_until(self, what: str, check: Callable[[], object], timeout: float = 120) -> None:
        """Retries ``check`` until it passes: a predicate passes when it returns something truthy; a
        Playwright-style check returns None and fails by raising AssertionError."""

        def passed() -> object:
            result = check()
            return True if result is None else result

        def died() -> str | None:
            return None if self.proc.poll() is None else f"the worker exited ({self.proc.returncode})"

        try:
            wait_until(passed, timeout=timeout, interval=0.3, what=what, abort=died)
        except AssertionError as error:
            raise AssertionError(f"{error}; worker log:\n{self.tail()}") from error


@contextlib.contextmanager
def celery_worker(
    name: str,
    *,
    queues: Sequence[str] = (),
    env: dict[str, str] | None = None,
    app: str = "app",
    loglevel: str = "INFO",
) -> Iterator[Worker]:
    """A solo-pool worker on ``queues`` (default: this run's default queue); it inherits the environment
    plus ``env``; stopped with its process group afterwards."""
    log = LOGS / f"{name}-worker.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        **(env or {}),
    }
    command = [sys.executable, "-m", "celery", "-A", app, "worker", "--pool", "solo", "--loglevel", loglevel]
    command += ["--queues", ",".join(queues or [settings.CELERY_TASK_DEFAULT_QUEUE])]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, env=full_env, start_new_session=True, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield Worker(proc, log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
