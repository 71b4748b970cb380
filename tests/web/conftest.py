from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from app.web import roles

PASSWORD = "correct horse battery staple"


def make_user(username: str, *role_names: str) -> User:
    user = User.objects.create_user(username, f"{username}@example.com", PASSWORD)
    user.groups.set([Group.objects.get(name=name) for name in role_names])
    return user


@pytest.fixture
def users(db: None) -> dict[str, User]:
    """One user per role, plus a second approver (the requester of actions in these tests)."""
    return {
        "viewer": make_user("vera", roles.VIEWER),
        "operator": make_user("otto", roles.OPERATOR),
        "approver": make_user("anna", roles.APPROVER),
        "requester": make_user("rick", roles.OPERATOR, roles.APPROVER),
        "admin": make_user("adam", roles.ADMIN),
        "nobody": make_user("nora"),
    }


@pytest.fixture
def login(client: Client, users: dict[str, User]) -> Callable[[str], Client]:
    def as_role(role: str) -> Client:
        client.force_login(users[role])
        return client

    return as_role


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """What the services would send to Celery on commit (these tests do not run the diagnosis)."""
    sent: list[tuple[str, int]] = []
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: sent.append(("diagnosis", pk)))
    monkeypatch.setattr("diagnostics.tasks.enqueue_execution", lambda pk: sent.append(("execution", pk)))
    return sent
