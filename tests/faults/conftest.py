"""Fixtures of the fault tests: a folder and a queue shared with the workers, the "fault" environment
registered in this process too, and the two people of an approval."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

import tests.faults.environment  # noqa: F401  (registers the "fault" environment here too)
from tests.faults.workers import purge
from tests.support.fake_environment import incident_user


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Shared by this test and its workers (the environment's gates, markers and run log)."""
    return tmp_path


@pytest.fixture
def queue(request: pytest.FixtureRequest, settings: Any) -> Iterator[str]:
    """A queue of this test's own, for its workers and for what this process sends them."""
    name = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-faults-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    settings.DIAGNOSTICS_QUEUE = name
    yield name
    purge(name)


@pytest.fixture
def requester(transactional_db: None) -> User:
    return incident_user("requester", approver=True, operator=True)


@pytest.fixture
def approver(transactional_db: None) -> User:
    return incident_user("approver", approver=True)
