"""The Celery app of the fault tests' workers: the project's app, its beat running only the sweep(s)
a test is about (FAULT_SWEEPS, comma-separated beat entry names), so the other periodic tasks do not
queue up ahead of the jobs (the file transport's prefork consumer takes about one message a second).

Run as ``celery -A tests.faults.worker_app worker`` (tests/faults/workers.py does).
"""

import os

from app.celery import celery_app

_wanted = {name for name in os.environ.get("FAULT_SWEEPS", "").split(",") if name}
celery_app.conf.beat_schedule = {
    name: entry for name, entry in celery_app.conf.beat_schedule.items() if name in _wanted
}

__all__ = ["celery_app"]
