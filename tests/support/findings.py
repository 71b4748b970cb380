"""Analyzer tests' helpers: the tool outputs they feed (a pod's log, a listing, a manifest), the findings of
one output, of several read in turn, and their kinds."""

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


def pod_log(pod: str, namespace: str, text: str, tool: str = "fetch_pod_logs") -> ToolOutput:
    """A pod's log as the log tool returns it."""
    return ToolOutput(tool, {"pod_name": pod, "namespace": namespace}, text)


def listing(kind: str, namespace: str, text: str) -> ToolOutput:
    """A ``kubectl get <kind> -n <namespace>`` table."""
    return ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": kind, "namespace": namespace}, text)


def manifest(kind: str, name: str, namespace: str, text: str) -> ToolOutput:
    """One object's ``kubectl get -o yaml`` (YAML or JSON)."""
    return ToolOutput("kubectl_get_yaml", {"kind": kind, "name": name, "namespace": namespace}, text)
