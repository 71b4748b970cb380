"""Analyzers that gather facts across a case's outputs and report one finding, once.

Such an analyzer keeps its facts in ``state.fact_dict(name)``: each output adds what it shows
(``gather``), then ``conclude`` looks at all the facts so far and returns the finding when they are
complete; after it has reported, the analyzer stays quiet for the rest of the case.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput
from diagnostics.agent.findings import Finding

# The Service a client called, from a URL in its log: ``//<service>.<namespace>[.svc[.cluster.local]]``.
SERVICE_HOST = rx.compile(r"(?i)//([a-z0-9][\w-]*)\.([a-z0-9][\w-]*)(?:\.svc(?:\.cluster\.local)?)?[:/]")


class OnceAnalyzer(Analyzer):
    """Gathers facts from each output, and reports what ``conclude`` finds from them once per case."""

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict(self.name)
        namespace = str(out.params.get("namespace") or "")
        self.gather(out, state, facts, namespace)
        if facts.get("reported"):
            return []
        findings = self.conclude(facts)
        if findings:
            facts["reported"] = True
        return findings

    @abstractmethod
    def gather(self, out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        """Add what the output shows to the facts (and the leads it opens to the state)."""

    @abstractmethod
    def conclude(self, facts: dict[str, Any]) -> list[Finding]:
        """The finding the facts gathered so far make, or none yet."""


def wait_for_more(facts: dict[str, Any], limit: int) -> bool:
    """Whether to wait for another output before reporting, ``limit`` outputs at most (this one counted)."""
    if facts.get("waits", 0) >= limit:
        return False
    facts["waits"] = facts.get("waits", 0) + 1
    return True
