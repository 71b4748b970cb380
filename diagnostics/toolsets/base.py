"""Toolset interfaces. Read and write are different classes with different entry points: a Probe is
given only ReadToolsets, the Executor is the only holder of WriteToolsets (design.md section 4).

Environments (replay, local, kubernetes, prometheus) implement these ABCs and register by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from routing.schemas import schema_errors


def object_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """The parameters schema of a tool or action: these properties and no others."""
    return {
        "type": "object",
        "properties": properties,
        "required": required or [],
        "additionalProperties": False,
    }


def validation_error(schema: dict[str, Any], value: dict[str, Any]) -> str | None:
    """Why ``value`` does not fit ``schema``, or None when it does. A schema may come from outside (an
    MCP server's tool): it is checked as a caller's is (routing/schemas.py: no reference leaves it,
    linear-time patterns, bounded size), and one that cannot be used refuses every value."""
    return schema_errors(schema, value)


@dataclass(frozen=True)
class ToolSpec:
    """A tool an agent may ask for: a name, what it does, and a JSON schema of its parameters."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True)
class ToolResult:
    tool: str
    params: dict[str, Any]
    output: str
    ok: bool = True
    # No recording / no data for this call: a clear result, never an exception.
    no_data: bool = False
    # What the output is, when its toolset knows better than the tool's name ("logs", "metrics",
    # "events", "traces"; e.g. an operator's setting per MCP tool). Empty: read from the name.
    kind: str = ""


@dataclass(frozen=True)
class ActionResult:
    action: str
    args: dict[str, Any]
    ok: bool
    output: str


@dataclass(frozen=True)
class HealthResult:
    healthy: bool
    detail: str
    # The parts found failing (services, workloads), when the check names them: "worse" compares them.
    failing: tuple[str, ...] = ()


class ReadToolset(ABC):
    """Read-only tools: logs, metrics, traces, describe/get, events, config, process state."""

    name: ClassVar[str]

    @abstractmethod
    def tools(self) -> list[ToolSpec]: ...

    @abstractmethod
    def call(self, tool: str, params: dict[str, Any]) -> ToolResult: ...

    def reference_time(self) -> datetime | None:
        """When the data this toolset serves was recorded (a replay: the case's time); None: it reads live."""
        return None


class WriteToolset(ABC):
    """Write actions (restart, rollback, scale, patch config), each on an allow-list with an
    argument schema. Only the Executor holds one."""

    name: ClassVar[str]

    @abstractmethod
    def actions(self) -> list[ToolSpec]: ...

    @abstractmethod
    def run(self, action: str, args: dict[str, Any]) -> ActionResult: ...

    @abstractmethod
    def health(self, target: str) -> HealthResult:
        """Whether what an action was meant to restore is healthy again."""

    def system_health(self, *, settle: bool = False) -> HealthResult | None:
        """The whole environment's health (the symptom as a whole, before and after a fix): one round, or
        with ``settle`` given the time the environment's health check allows to become stable; None where
        the environment has no such check (then only the target is checked)."""
        return None

    def inverse(self, action: str, args: dict[str, Any], output: str) -> tuple[str, dict[str, Any]] | None:
        """The action (and arguments) that undoes ``action`` as it ran (its ``output`` says what it
        changed from); None when it cannot be undone by one of this toolset's actions."""
        return None
