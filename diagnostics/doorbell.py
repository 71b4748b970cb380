"""The doorbell the diagnostics services ring once a write commits: a diagnosis queued, an approved
action to run, an interrupted action to recover, an executed fix to check (the broker is only the
doorbell: ``core/jobs.py``).

The services never import the tasks module, which imports them. ``diagnostics/tasks.py`` is what rings,
and ``DiagnosticsConfig.ready()`` installs it here; a service asks for it when it rings, so it calls the
``enqueue_*`` function the module holds at that moment (a replaced one, such as a test's, included).
"""

from __future__ import annotations

from typing import Protocol


class Tasks(Protocol):
    """What the services enqueue (``diagnostics/tasks.py`` as a module is one)."""

    def enqueue_diagnosis(self, trajectory_id: int) -> None: ...

    def enqueue_execution(self, action_request_id: int) -> None: ...

    def enqueue_recovery(self, action_request_id: int, attempt: int) -> None: ...

    def enqueue_verification(self, action_request_id: int, delay_s: float) -> None: ...


_tasks: Tasks | None = None


def install(tasks: Tasks) -> None:
    """Makes ``tasks`` the doorbell (``DiagnosticsConfig.ready()``)."""
    global _tasks
    _tasks = tasks


def tasks() -> Tasks:
    """The installed doorbell; Django's start-up (``django.setup()``) installs it."""
    if _tasks is None:
        raise RuntimeError("no diagnostics tasks installed: DiagnosticsConfig.ready() installs them")
    return _tasks
