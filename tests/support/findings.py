"""Analyzer tests' helpers: the findings of one tool output, and their kinds."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.request.subject import AlertContext


def findings_of(text: str, *, tool: str = "kubectl_describe", params=None, state=None):  # type: ignore[no-untyped-def]
    state = state or AnalysisState(AlertContext())
    return analyze(ToolOutput(tool, params or {}, text), state), state


def kinds(findings) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.kind for f in findings}
