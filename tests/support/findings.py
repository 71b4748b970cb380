"""Analyzer tests' helpers: the findings of one tool output, of several read in turn, and their kinds."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def findings_of(text: str, *, tool: str = "kubectl_describe", params=None, state=None):  # type: ignore[no-untyped-def]
    state = state or AnalysisState(AlertContext())
    return analyze(ToolOutput(tool, params or {}, text), state), state


def kinds(findings) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.kind for f in findings}


def run_outputs(*outs: ToolOutput) -> tuple[list[Finding], AnalysisState]:
    """The findings of ``outs`` analysed in turn on one fresh state, and that state."""
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return found, state


def of_kind(found: list[Finding], kind: str) -> list[Finding]:
    return [f for f in found if f.kind == kind]
