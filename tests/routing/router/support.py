"""A real Celery worker on this run's queue and database, for the router tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

from django.conf import settings
from django.db import connection


def _database_url() -> str:
    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{conf['NAME']}"
    auth = conf["USER"] + (f":{conf['PASSWORD']}" if conf["PASSWORD"] else "")
    return f"postgres://{auth}@{conf['HOST'] or '127.0.0.1'}:{conf['PORT'] or 5432}/{conf['NAME']}"


@contextlib.contextmanager
def celery_worker() -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "DATABASE_URL": _database_url(), "CELERY_BROKER_URL": settings.CELERY_BROKER_URL}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "app",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "WARNING",
            "--queues",
            settings.CELERY_TASK_DEFAULT_QUEUE,
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
