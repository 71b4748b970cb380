"""Celery tasks of the student's adapter health (training/adapter_health.py): beat checks every student
backend; a call that found its adapter missing asks for one backend's check by name
(routing/call/replicas.py ``CHECK_TASK``)."""

from __future__ import annotations

from celery import shared_task

from training import adapter_health


@shared_task(acks_late=True, ignore_result=True)
def student_health_check(backend_id: int) -> str:
    """Checks one student backend's replicas and reloads missing adapters; idempotent."""
    status = adapter_health.check_backend(int(backend_id))
    failing = sorted(url for url, entry in status.items() if entry.get("failing_since"))
    return f"{len(status)} replicas, failing: {', '.join(failing) or 'none'}"


@shared_task(acks_late=True, ignore_result=True)
def student_health_check_all() -> int:
    """Beat: one check per active student backend."""
    ids = adapter_health.check_all()
    for pk in ids:
        student_health_check.delay(pk)
    return len(ids)
