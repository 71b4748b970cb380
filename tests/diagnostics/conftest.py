"""Fixtures of the diagnostics tests: users in the incident roles and a recording Celery queue. The
"fake" environment they diagnose lives in tests/support/fake_environment.py."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests.support.fake_environment import incident_user


@pytest.fixture
def requester(db: None) -> User:
    """Opens incidents and could approve, were they not the requester (operator and approver)."""
    return incident_user("requester", approver=True, operator=True)


@pytest.fixture
def approver(db: None) -> User:
    return incident_user("approver", approver=True)


@pytest.fixture
def bystander(db: None) -> User:
    return incident_user("bystander")


@pytest.fixture
def no_enqueue(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Record instead of sending Celery messages."""
    sent: list[tuple[str, int]] = []
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: sent.append(("diagnosis", pk)))
    monkeypatch.setattr("diagnostics.tasks.enqueue_execution", lambda pk: sent.append(("execution", pk)))
    monkeypatch.setattr(
        "diagnostics.tasks.enqueue_verification", lambda pk, delay: sent.append(("verification", pk))
    )
    return sent
