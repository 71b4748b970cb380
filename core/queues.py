"""Enqueueing Celery tasks: on a named queue (empty: Celery's default or the task's route), and
only once the current transaction commits, so a worker never looks for a row not yet committed.

The apps keep their own ``enqueue_*`` hooks (tests replace those); the hooks use these helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Task
from django.db import transaction


def queue_options(queue: str) -> dict[str, str]:
    """``apply_async`` options for ``queue``; none for an empty name (the default queue or a route)."""
    return {"queue": queue} if queue else {}


def enqueue(task: Task, *args: Any, queue: str = "") -> None:
    """Sends ``task(*args)`` now, on ``queue``."""
    task.apply_async(args, **queue_options(queue))


def on_commit(callback: Callable[..., object], *args: Any, using: str | None = None) -> None:
    """Calls ``callback(*args)`` once the current transaction commits (at once outside of one)."""
    transaction.on_commit(lambda: callback(*args), using=using)
