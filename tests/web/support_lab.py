"""A real Celery worker for the browser tests, its log kept as a test artifact, and a wait that
reports the worker's log when the page does not get where it should."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings

from tests.routing.test_celery_worker import worker_database_url
from tests.web.browser import ARTIFACTS


class Worker:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def wait_until(self, what: str, check: Callable[[], object], timeout: float) -> None:
        """Retries ``check`` (a short Playwright ``expect``, or a predicate) until it passes; fails at
        once with the worker's log if the worker died, or with it at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check() is False:
                    time.sleep(0.3)
                    raise AssertionError(f"not yet: {what}")
                return
            except AssertionError as error:
                if self.proc.poll() is not None:
                    why = f"the worker exited ({self.proc.returncode})"
                elif time.monotonic() > deadline:
                    why = f"timed out waiting for {what}"
                else:
                    continue
                raise AssertionError(f"{why}; worker log:\n{self.tail()}") from error


@contextlib.contextmanager
def celery_worker(name: str, *, env: dict[str, str] | None = None, gpu: bool = False) -> Iterator[Worker]:
    """A worker on this run's queue (and its gpu queue with ``gpu``), broker and test database; it
    inherits the environment (the lab's SKILLGATE_LAB_* variables included) plus ``env``. Its log
    goes to the artifacts folder."""
    queues = [settings.CELERY_TASK_DEFAULT_QUEUE]
    if gpu:
        queues.append(settings.SKILLGATE["TRAINING"]["QUEUE"])
    log = ARTIFACTS.parent / f"{name}-worker.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        **(env or {}),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "celery", "-A", "app", "worker", "--pool", "solo"),
                *("--loglevel", "INFO", "--queues", ",".join(queues)),
            ],
            env=env,
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,
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
