"""The "fake" diagnosis environment of the tests (registered on import), the HolmesGPT cases folder,
and users holding the incident roles.

A tiny system: the api process is down and its log says why. Its write toolset records what it is
asked to run (``FakeWrite.runs``), so tests can prove what did and did not run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from django.conf import settings
from django.contrib.auth.models import User

from diagnostics.toolsets.base import (
    ActionResult,
    HealthResult,
    ReadToolset,
    ToolResult,
    ToolSpec,
    WriteToolset,
)
from diagnostics.toolsets.registry import Environment, register_environment
from tests.factories import UserFactory

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


def incident_user(username: str, *, approver: bool = False, operator: bool = False) -> User:
    """A user with the approver role (reads, approves) and/or the operator role (reads, opens)."""
    roles = [name for name, held in (("approver", approver), ("operator", operator)) if held]
    permissions = ["approve_actionrequest"] if approver else []
    user = UserFactory.create(username=username, roles=roles, permissions=permissions)
    return User.objects.get(pk=user.pk)  # drop the permission cache


def compare_on_crashpod() -> str:
    """What ``diagnose_replay --compare`` prints for the recorded 09_crashpod case (keyword grader)."""
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command(
        "diagnose_replay", "--cases", str(CASES), "--case", "09_crashpod", "--grader", "keyword", "--compare",
        stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    return out.getvalue()
