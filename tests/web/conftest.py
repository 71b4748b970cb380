from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


@pytest.fixture(scope="session")
def browser_type_launch_args(
    browser_type_launch_args: dict[str, Any], django_db_setup: None
) -> dict[str, Any]:
    """Debian's chromium (never `playwright install`), headless, no network chatter.

    The test database is created first: Playwright's sync API keeps an event loop on the main
    thread from launch on, and Django refuses sync ORM calls next to a running loop unless told.
    """
    from tests.web.browser import CHROMIUM

    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    }
