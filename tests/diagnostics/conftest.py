from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User

from diagnostics.toolsets.base import (
    ActionResult,
    HealthResult,
    ReadToolset,
    ToolResult,
    ToolSpec,
    WriteToolset,
)
from diagnostics.toolsets.registry import Environment, register_environment

CASES = Path(settings.EVAL_DIR) / "holmesgpt" / "cases"

_SERVICE = {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]}


class FakeRead(ReadToolset):
    """A tiny system: the api process is down and its log says why."""

    name = "fake"

    def tools(self) -> list[ToolSpec]:
        return [
            ToolSpec("list_processes", "Every process and its state."),
            ToolSpec("tail_log", "A service's log.", _SERVICE),
        ]

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        if tool == "list_processes":
            return ToolResult(
                tool, params, "NAME   STATE\napi    FATAL  Exited too quickly\nweb    RUNNING  pid 7"
            )
        if tool == "tail_log" and params.get("service") == "api":
            return ToolResult(
                tool, params, "starting api\nERROR: environment variable DATABASE_URL is not set"
            )
        return ToolResult(tool, params, "no such service", ok=False, no_data=True)


class FakeWrite(WriteToolset):
    """Records what it is asked to run, so tests can prove what did (not) run."""

    name = "fake"
    runs: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def actions(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                "restart_service",
                "Restart a service.",
                {
                    "type": "object",
                    "properties": {"service": {"type": "string", "enum": ["api", "web"]}},
                    "required": ["service"],
                    "additionalProperties": False,
                },
            )
        ]

    def run(self, action: str, args: dict[str, Any]) -> ActionResult:
        FakeWrite.runs.append((action, dict(args)))
        return ActionResult(action, args, True, f"{action} {args} done")

    def health(self, target: str) -> HealthResult:
        return HealthResult(True, f"{target} answers 200")


@register_environment
class FakeEnvironment(Environment):
    name = "fake"

    def read_toolsets(self) -> list[ReadToolset]:
        return [FakeRead()]

    def write_toolsets(self) -> list[WriteToolset]:
        return [FakeWrite()]


@pytest.fixture
def write_log() -> list[tuple[str, dict[str, Any]]]:
    FakeWrite.runs.clear()
    return FakeWrite.runs


def _user(username: str, *, approver: bool = False, operator: bool = False) -> User:
    """A user with the approver role (reads, approves) and/or the operator role (reads, opens)."""
    user = User.objects.create(username=username)  # no password: tests log in with force_login or API keys
    if approver:
        user.user_permissions.add(Permission.objects.get(codename="approve_actionrequest"))
        user.groups.add(Group.objects.get(name="approver"))
    if operator:
        user.groups.add(Group.objects.get(name="operator"))
    return User.objects.get(pk=user.pk)  # drop the permission cache


@pytest.fixture
def requester(db: None) -> User:
    """Opens incidents and could approve, were they not the requester (operator and approver)."""
    return _user("requester", approver=True, operator=True)


@pytest.fixture
def approver(db: None) -> User:
    return _user("approver", approver=True)


@pytest.fixture
def bystander(db: None) -> User:
    return _user("bystander")


@pytest.fixture
def no_enqueue(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Record instead of sending Celery messages."""
    sent: list[tuple[str, int]] = []
    monkeypatch.setattr("diagnostics.tasks.enqueue_diagnosis", lambda pk: sent.append(("diagnosis", pk)))
    monkeypatch.setattr("diagnostics.tasks.enqueue_execution", lambda pk: sent.append(("execution", pk)))
    return sent
