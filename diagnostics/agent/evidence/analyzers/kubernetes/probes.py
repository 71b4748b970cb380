"""A startup probe whose budget is shorter than the application's start.

The kubelet runs a container's startup probe from ``initialDelaySeconds`` on, every ``periodSeconds``; after
``failureThreshold`` failures in a row it kills the container ("failed startup probe, will be restarted")
and restarts it by the pod's restartPolicy. The budget a start has is therefore
``initialDelaySeconds + periodSeconds x failureThreshold``. A container killed that way while its log
still shows it starting (its last lines before the SIGTERM are progress, not an error) needs more time,
not another fix: every restart begins the start again, so it never finishes.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    ToolOutput,
    clip,
    field_value,
    register_correlator,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity

_STARTUP = rx.compile(
    r"^\s+Startup:\s+(.*?)\bdelay=(\d+)s\s+timeout=(\d+)s\s+period=(\d+)s\s+#success=\d+\s+#failure=(\d+)",
    rx.MULTILINE,
)
_KILLED = rx.compile(r"Container (\S+) failed startup probe, will be restarted")
_STOPPING = rx.compile(r"SIGTERM|shutting down|received signal|terminat", rx.IGNORECASE)
_ERROR = rx.compile(r"\b(?:ERROR|FATAL|CRITICAL|panic|Traceback|Exception)\b")


def startup_budget(text: str) -> tuple[int, int, int, str] | None:
    """(delay, period, failures, probe target) of the first startup probe a pod describe shows."""
    match = _STARTUP.search(text)
    if match is None:
        return None
    return int(match.group(2)), int(match.group(4)), int(match.group(5)), match.group(1).strip()


def last_progress(lines: list[str]) -> str:
    """The last line before the container was told to stop, when the lines before the stop hold no error."""
    stop = next((i for i in range(len(lines) - 1, -1, -1) if _STOPPING.search(lines[i])), len(lines))
    before = [line for line in lines[:stop] if line.strip()]
    if not before or any(_ERROR.search(line) for line in before):
        return ""
    return before[-1].strip()


def _logs_of(state: AnalysisState, namespace: str, pod: str) -> list[ToolOutput]:
    return [
        out
        for out in state.outputs
        if out.is_log
        and out.params.get("pod_name") == pod
        and out.params.get("namespace", namespace) == namespace
        and out.ok
        and not out.no_data
    ]


@register_correlator
def startup_probe_too_short(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    reported = state.fact_set("startup_budget_reported")
    out: list[Finding] = []
    for described in state.outputs:
        killed = _KILLED.search(described.text)
        budget = startup_budget(described.text) if killed else None
        name, namespace = field_value(described.text, "Name"), field_value(described.text, "Namespace")
        if killed is None or budget is None or not name:
            continue
        ref = ObjRef("pod", name, namespace)
        progress = ""
        for log in _logs_of(state, namespace, name):
            progress = progress or last_progress(log.text.splitlines())
        if ref.label in reported or not progress:
            continue
        reported.add(ref.label)
        delay, period, failures, target = budget
        total = delay + period * failures
        container = killed.group(1)
        out.append(
            Finding(
                "startup_probe_too_short",
                f"The startup probe of {container} (pod {name}) allows only {total} seconds, {failures} "
                f"failures {period} seconds apart after a {delay} s delay, and the kubelet restarts the "
                f"container while it is still starting: its last line before the SIGTERM is progress "
                f"('{clip(progress, 120)}'), not an error. Every restart begins the start again.",
                Severity.CRITICAL,
                ref.label,
                f"Startup: {target} delay={delay}s period={period}s #failure={failures}; {killed.group(0)}",
                86,
                f"Give the start more time: raise the startup probe's failureThreshold (or periodSeconds) "
                f"of {container} above its real start time (now {total} s).",
            )
        )
    return out
