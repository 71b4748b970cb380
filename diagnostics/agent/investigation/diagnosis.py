"""A diagnosis written from findings alone (no LLM): root cause first, then what else was found,
the fix, and a health verdict."""

from __future__ import annotations

from dataclasses import dataclass

from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.freshness import history_lines
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


@dataclass(frozen=True)
class Diagnosis:
    text: str
    root_cause: str
    healthy: bool | None


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Current problems first (by rank), history after them."""
    return sorted(findings, key=lambda f: (-int(f.is_problem), int(f.history), -f.rank, -int(f.severity)))


def _subject_words(alert: AlertContext) -> str:
    subject = alert.subject
    if subject.name:
        return f"{subject.kind + ' ' if subject.kind else ''}{subject.name}" + (
            f" in namespace {subject.namespace}" if subject.namespace else ""
        )
    if subject.namespace:
        return f"namespace {subject.namespace}"
    return alert.title or "the system"


def build_diagnosis(
    alert: AlertContext,
    findings: list[Finding],
    state: AnalysisState,
    *,
    calls: int = 0,
    no_data: int = 0,
    proposed: list[str] | None = None,
    checked: list[str] | None = None,
) -> Diagnosis:
    ranked = rank_findings(findings)
    problems = [f for f in ranked if f.is_problem]
    heartbeat = next((f for f in ranked if f.kind == "heartbeat_alert"), None)
    about = _subject_words(alert)
    lines: list[str] = []
    healthy: bool | None
    if problems:
        top = problems[0]
        root = top.summary
        lines.append(f"Diagnosis of {about}.")
        lines.append(f"Root cause: {top.summary}")
        if top.at:
            lines.append(f"(Current: seen at {top.at}.)")
        others: list[Finding] = []
        seen = {top.summary}
        for finding in problems[1:]:
            if finding.summary not in seen and len(others) < 7:
                seen.add(finding.summary)
                others.append(finding)
        if others:
            lines.append("Also found:")
            lines += [f"- {f.summary}" for f in others]
        fixes = list(dict.fromkeys(f.fix for f in problems[:4] if f.fix))
        if fixes:
            lines.append("Fix: " + " ".join(fixes[:2]))
        healthy = False
    elif heartbeat is not None:
        root = heartbeat.summary
        lines.append(heartbeat.summary)
        if heartbeat.fix:
            lines.append(heartbeat.fix)
        healthy = True
    elif alert.subject.name and not _found(state, findings):
        names = ", ".join(alert.subject.names[:3])
        searched = sorted({k.split(":", 1)[0] or "object" for k in state.fact_set("not_found")})
        where = f" (searched {', '.join(searched)} in all namespaces)" if searched else ""
        root = f"{names} could not be found"
        lines.append(
            f"Could not find {names}: no resource with that name could be found in the environment{where}. "
            "Check the name (it may be misspelled or deleted), or tell me the namespace or the exact "
            "resource."
        )
        healthy = None
    else:
        info = [
            f.summary
            for f in ranked
            if f.kind in ("pod_healthy", "workload_available", "rollout_in_progress")
        ]
        root = "no problem found"
        lines.append(f"No problem found: {about} appears healthy.")
        lines += [f"- {summary}" for summary in info[:6]]
        if checked:
            shown = "; ".join(checked[:12]) + (f"; and {len(checked) - 12} more" if len(checked) > 12 else "")
            lines.append(f"Checked, and clean: {shown}.")
        if not info:
            lines.append("The checks that returned data showed no errors, restarts or failing events.")
        healthy = True
    lines += history_lines(ranked, state.window)
    if proposed:
        lines.append("Proposed action (waits for approval): " + "; ".join(proposed))
    if healthy is not None:
        lines.append(f"workload_healthy: {'true' if healthy else 'false'}")
    if calls:
        lines.append(f"({calls} tool calls, {no_data} without data.)")
    return Diagnosis("\n".join(lines), root, healthy)


def _found(state: AnalysisState, findings: list[Finding]) -> bool:
    return (
        bool(state.fact_set("found"))
        or bool(state.facts.get("data_about_subject"))
        or any(f.kind not in ("crd_missing", "no_data") for f in findings)
    )
