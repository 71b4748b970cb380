"""The doorbell the training services ring once a write commits: a cycle's next stage, an adapter's
training run, an Evolver job (the broker is only the doorbell: ``core/jobs.py``).

The services never import the tasks modules, which import them. ``training/tasks/`` is what rings, and
``TrainingConfig.ready()`` installs its modules here; a service asks for them when it rings, so it calls
the ``enqueue_*`` function a module holds at that moment (a replaced one, such as a test's, included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class CycleTasks(Protocol):
    """``training/tasks/cycle.py``."""

    def enqueue_stage(self, cycle_id: int, stage: str) -> None: ...


class AdapterTasks(Protocol):
    """``training/tasks/adapters.py``."""

    def enqueue_training(self, run_id: int) -> None: ...


class EvolverTasks(Protocol):
    """``training/tasks/evolver.py``."""

    def enqueue_evolve(self, skill_id: int) -> None: ...

    def enqueue_admission(self, skill_set_id: int) -> None: ...


@dataclass(frozen=True)
class Tasks:
    cycle: CycleTasks
    adapters: AdapterTasks
    evolver: EvolverTasks


_tasks: Tasks | None = None


def install(*, cycle: CycleTasks, adapters: AdapterTasks, evolver: EvolverTasks) -> None:
    """Makes these modules the doorbell (``TrainingConfig.ready()``)."""
    global _tasks
    _tasks = Tasks(cycle=cycle, adapters=adapters, evolver=evolver)


def tasks() -> Tasks:
    """The installed doorbell; Django's start-up (``django.setup()``) installs it."""
    if _tasks is None:
        raise RuntimeError("no training tasks installed: TrainingConfig.ready() installs them")
    return _tasks
