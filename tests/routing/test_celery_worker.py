"""A real Celery worker on the configured broker (Redis in CI, the file transport by default)
releases budget held by a call that never settled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from routing import budgets
from routing.models import ApiKey, Reservation
from routing.tasks import release_stale_reservations
from tests.factories import ApiKeyFactory


def worker_database_url() -> str:
    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{conf['NAME']}"
    auth = conf["USER"] + (f":{conf['PASSWORD']}" if conf["PASSWORD"] else "")
    return f"postgres://{auth}@{conf['HOST'] or '127.0.0.1'}:{conf['PORT'] or 5432}/{conf['NAME']}"


@pytest.fixture
def worker(transactional_db: None):  # type: ignore[no-untyped-def]
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
    }
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
            "INFO",
            "--queues",
            settings.CELERY_TASK_DEFAULT_QUEUE,
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(20)


def test_worker_releases_lost_reservations(worker):
    key = ApiKeyFactory.create(budget_usd=Decimal(1))
    lost = budgets.reserve(api_key_id=key.pk, amount=Decimal("0.75"))
    Reservation.objects.filter(pk=lost.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    release_stale_reservations.delay()

    deadline = time.monotonic() + 60
    while Reservation.objects.filter(pk=lost.pk).exists():
        assert worker.poll() is None, worker.stdout.read().decode()[-2000:]
        assert time.monotonic() < deadline, "the worker did not run the task"
        time.sleep(0.2)
    assert ApiKey.objects.get(pk=key.pk).reserved_usd == 0
    # The budget is usable again.
    budgets.reserve(api_key_id=key.pk, amount=Decimal("0.9"))
