"""Real Celery workers for the fault tests, with the sweeper on (embedded beat) and short job
timings, so a killed worker's jobs come back within seconds; ``kill9`` is a real SIGKILL of the
worker's whole process group (its pool children and its beat included)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings

from tests.support.celery_worker import LOGS, Worker, worker_database_url

# The job timings the fault workers run with (app/settings/operations.py JOBS_*).
HEARTBEAT_S = 0.5
STALE_AFTER_S = 3.0
SWEEP_EVERY_S = 2.0  # the file transport's prefork consumer takes about one message a second
RING_AFTER_S = 10.0
MAX_ATTEMPTS = 3
JOB_ENV = {
    "SKILLGATE_JOBS_HEARTBEAT_S": str(HEARTBEAT_S),
    "SKILLGATE_JOBS_STALE_AFTER_S": str(STALE_AFTER_S),
    "SKILLGATE_JOBS_RING_AFTER_S": str(RING_AFTER_S),
    "SKILLGATE_JOBS_SWEEP_EVERY_S": str(SWEEP_EVERY_S),
    "SKILLGATE_JOBS_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
    "SKILLGATE_DIAGNOSTICS_ENVIRONMENT_MODULES": json.dumps({"fault": "tests.faults.environment"}),
}


@contextlib.contextmanager
def fault_worker(
    name: str,
    folder: Path,
    queue: str,
    *,
    beat: bool = False,
    sweeps: tuple[str, ...] = ("sweep-diagnostics-jobs",),
    pool: str = "solo",
    concurrency: int = 1,
    loglevel: str = "INFO",
    env: dict[str, str] | None = None,
) -> Iterator[Worker]:
    """A worker on ``queue`` (the test's own: its default queue and DIAGNOSTICS_QUEUE, so what an
    earlier test left there cannot reach it). ``beat``: with the sweeper (embedded beat running the
    ``sweeps`` entries of CELERY_BEAT_SCHEDULE, its schedule file in ``folder``). ``pool``: solo
    (kill -9 kills the task with it; a task that blocks blocks the sweeps too) or prefork
    (``concurrency`` children). ``env``: more of the worker's environment."""
    log = LOGS / f"faults-{name}-worker.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        **JOB_ENV,
        "CELERY_DEFAULT_QUEUE": queue,
        "SKILLGATE_DIAGNOSTICS_QUEUE": queue,
        "FAULT_SWEEPS": ",".join(sweeps),
        **(env or {}),
    }
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "tests.faults.worker_app",
        "worker",
        "--loglevel",
        loglevel,
    ]
    command += ["--queues", queue, "--hostname", f"{name}-{os.getpid()}@%h"]
    command += ["--pool", pool] + (["--concurrency", str(concurrency)] if pool == "prefork" else [])
    if beat:
        command += ["--beat", "--schedule", str(folder / f"beat-{name}")]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, env=env, start_new_session=True, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield Worker(proc, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                kill9(Worker(proc, log))


def kill9(worker: Worker) -> None:
    """SIGKILL to the worker's process group, and wait for it to be gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait(10)


class Stopwatch:
    """Times a recovery, and appends it to the test artifacts' faults-recovery.jsonl (the numbers the
    README's failure-modes table quotes)."""

    def __init__(self, test: str) -> None:
        self.test = test
        self.started = time.monotonic()

    def record(self, what: str, **extra: Any) -> float:
        elapsed = time.monotonic() - self.started
        broker = settings.CELERY_BROKER_URL.split(":", 1)[0]
        database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        line = {
            "test": self.test,
            "what": what,
            "seconds": round(elapsed, 2),
            "broker": broker,
            "db": database,
        }
        LOGS.mkdir(parents=True, exist_ok=True)
        with (LOGS / "faults-recovery.jsonl").open("a") as out:
            out.write(json.dumps({**line, **extra}) + "\n")
        return elapsed


def purge(queue: str) -> None:
    """Drops what is left on ``queue`` (beat's messages the killed worker never took), then the
    queue itself, so a shared broker (RabbitMQ, Redis) keeps none of the tests' queues."""
    from app.celery import celery_app

    # A queue never declared has nothing to purge.
    with celery_app.connection_for_write() as connection:
        for drop in (connection.default_channel.queue_purge, connection.default_channel.queue_delete):
            with contextlib.suppress(Exception):
                drop(queue)


def sweeps_done(worker: Worker) -> int:
    """How many diagnostics sweeps the worker has run so far (from its log)."""
    return sum(
        "diagnostics.tasks.sweep_jobs[" in line and "succeeded" in line
        for line in worker.log.read_text(errors="replace").splitlines()
    )
