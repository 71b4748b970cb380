"""A real Celery worker for the browser tests (on the gpu queue too when asked)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.conf import settings

from tests.support.celery_worker import Worker
from tests.support.celery_worker import celery_worker as _celery_worker


@contextlib.contextmanager
def celery_worker(name: str, *, env: dict[str, str] | None = None, gpu: bool = False) -> Iterator[Worker]:
    """A worker on this run's queue (and its gpu queue with ``gpu``); it inherits the environment (the
    lab's SKILLGATE_LAB_* variables included) plus ``env``."""
    queues = [settings.CELERY_TASK_DEFAULT_QUEUE]
    if gpu:
        queues.append(settings.SKILLGATE["TRAINING"]["QUEUE"])
    with _celery_worker(name, queues=queues, env=env) as worker:
        yield worker
