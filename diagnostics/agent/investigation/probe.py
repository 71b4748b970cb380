"""The Probe: the only way the agent reads the environment. It holds ReadToolsets and nothing else.

A toolset that is also a WriteToolset, or that keeps a WriteToolset in its attributes, is refused
at construction; the Probe itself has fixed slots, so nothing can be attached to it later.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from diagnostics.toolsets.base import ReadToolset, ToolResult, ToolSpec, WriteToolset


class ProbeConfigError(TypeError):
    """A toolset given to the Probe could write."""


def _holds_writer(toolset: ReadToolset) -> bool:
    values: list[Any] = list(vars(toolset).values()) if hasattr(toolset, "__dict__") else []
    for value in values:
        items = (
            value.values()
            if isinstance(value, dict)
            else value
            if isinstance(value, list | tuple | set)
            else [value]
        )
        if any(isinstance(item, WriteToolset) for item in items):
            return True
    return False


class Probe:
    __slots__ = ("_by_tool", "_specs", "_toolsets", "calls", "no_data_calls", "recorded_at")

    def __init__(self, toolsets: Sequence[ReadToolset]) -> None:
        for toolset in toolsets:
            if not isinstance(toolset, ReadToolset) or isinstance(toolset, WriteToolset):
                raise ProbeConfigError(
                    f"The Probe takes read-only toolsets; {type(toolset).__name__} is not one."
                )
            if _holds_writer(toolset):
                raise ProbeConfigError(
                    f"{type(toolset).__name__} holds a write toolset; the Probe refuses it."
                )
        self._toolsets: tuple[ReadToolset, ...] = tuple(toolsets)
        self._specs: list[ToolSpec] = []
        self._by_tool: dict[str, ReadToolset] = {}
        for toolset in self._toolsets:
            for spec in toolset.tools():
                if spec.name not in self._by_tool:
                    self._by_tool[spec.name] = toolset
                    self._specs.append(spec)
        self.calls = 0
        self.no_data_calls = 0
        # Toolsets that replay recordings read at the moment they were recorded, never the wall clock.
        self.recorded_at = next((t for ts in self._toolsets if (t := ts.reference_time()) is not None), None)

    def tools(self) -> list[ToolSpec]:
        return list(self._specs)

    def read_time(self) -> datetime:
        """When a read through the Probe happens: the recordings' time when it replays them (the case's
        time: a history line of a replay says when the case saw it), else now."""
        return self.recorded_at or datetime.now(UTC)

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        """Never raises: an unknown tool or a failing toolset is a failed (no-data) result."""
        self.calls += 1
        toolset = self._by_tool.get(tool)
        if toolset is None:
            self.no_data_calls += 1
            known = ", ".join(sorted(self._by_tool)) or "none"
            return ToolResult(
                tool, params, f"Unknown tool {tool!r}; available: {known}.", ok=False, no_data=True
            )
        try:
            result = toolset.call(tool, dict(params))
        except Exception as exc:  # a toolset bug or an unreachable backend must not stop the diagnosis
            self.no_data_calls += 1
            return ToolResult(
                tool, params, f"The tool failed: {type(exc).__name__}: {exc}", ok=False, no_data=True
            )
        if result.no_data:
            self.no_data_calls += 1
        return result
