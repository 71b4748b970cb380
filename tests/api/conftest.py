"""Fixtures of the operations API tests: an incident with a pending action, keys of each role."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from django.test import Client

from diagnostics import services
from diagnostics.models import ActionRequest, Incident
from routing import scopes
from tests.factories import KeyPair, UserFactory, make_key
from tests.support.fake_environment import FakeEnvironment  # noqa: F401  (registers the "fake" environment)


def call(client: Client, method: str, path: str, key: KeyPair | None = None, body: Any = None) -> Any:
    """One request with a bearer key (or none), the body as JSON."""
    headers = {"Authorization": f"Bearer {key.raw}"} if key else {}
    data = body if isinstance(body, str | bytes) else json.dumps(body if body is not None else {})
    if method == "GET":
        return client.get(path, headers=headers)
    return client.generic(method, path, data=data, content_type="application/json", headers=headers)


_keys = itertools.count()


def role_key(role: str, *granted: str) -> KeyPair:
    """A key of a new user holding ``role`` (app/web/roles.py; "none": no role), with ``granted`` scopes
    (all by default)."""
    n = next(_keys)
    owner = UserFactory.create(username=f"{role}-{n}", roles=[role] if role != "none" else [])
    return make_key(name=f"{role}-key-{n}", owner=owner, scopes=list(granted or scopes.ALL))


@pytest.fixture
def action(db: None, enqueued: list[tuple[str, int]]) -> ActionRequest:
    """A pending action of an incident opened by someone else than the callers of the tests."""
    creator = UserFactory.create(username="creator", roles=["operator"])
    incident = services.incident_open(title="api down", environment="fake", created_by=creator)
    return services.action_request_propose(
        trajectory=incident.trajectories.get(), tool="restart_service", args={"service": "api"}
    )


@pytest.fixture
def incident(action: ActionRequest) -> Incident:
    return action.trajectory.incident
