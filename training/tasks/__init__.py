"""Celery tasks of the training app; Celery's autodiscovery imports this package."""

from training.tasks import adapters, cycle, evolver

__all__ = ["adapters", "cycle", "evolver"]
