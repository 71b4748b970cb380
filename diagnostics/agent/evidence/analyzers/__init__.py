"""Analyzers: deterministic functions from raw tool output to findings (a small ABC + registry)."""

from diagnostics.agent.evidence.analyzers import (  # noqa: F401  (registration)
    chains,
    changes,
    commands,
    conntrack,
    dependency_chain,
    events,
    kubernetes,
    log_causes,
    log_signals,
    logs,
    metrics,
    network,
    node_memory,
    platform,
    removed_apis,
    resources,
    rotation,
    runtime_limits,
    tables,
    traces,
)
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    Lead,
    ToolOutput,
    analyze,
    analyzer_names,
    normalize,
    register,
)

__all__ = [
    "AnalysisState",
    "Analyzer",
    "Lead",
    "ToolOutput",
    "analyze",
    "analyzer_names",
    "normalize",
    "register",
]
