"""Celery tasks of the training app; Celery's autodiscovery imports this package."""

from training.tasks import adapter_health, adapters, cycle, evolver

__all__ = ["adapter_health", "adapters", "cycle", "evolver"]
