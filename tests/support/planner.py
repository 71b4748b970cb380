"""The rule planner's reads for an alert, decided one after another with no tool run: the diagnostics
planner tests' helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.investigation.observer import PROBE, InvestigationView
from diagnostics.agent.investigation.planner import RulePlanner
from diagnostics.agent.request.subject import AlertContext
from diagnostics.toolsets.base import ToolSpec


def tool_spec(name: str, *required: str) -> ToolSpec:
    """A tool ``name`` taking the string parameters ``required``."""
    props = {p: {"type": "string"} for p in required}
    return ToolSpec(name, name, {"type": "object", "properties": props, "required": list(required)})


def planned_reads(
    alert: AlertContext,
    tools: list[ToolSpec],
    most: int,
    *,
    state: AnalysisState | None = None,
    after: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """The parameters of the reads the planner decides, ``most`` at the most, until it decides other
    than a read; ``after(params)`` is called after each (to stand in for what the read would add to
    ``state``)."""
    if state is None:
        state = AnalysisState(alert)
    view = InvestigationView(alert, tools, [], [], [], state, 0, most)
    planner, reads = RulePlanner(max_iterations=most), []
    for _ in range(most):
        decision = planner.decide(view)
        if decision.kind != PROBE:
            break
        reads.append(decision.params)
        if after is not None:
            after(decision.params)
    return reads
