"""Across outputs: a process busy on CPU while requests are slow is the cause of the latency."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers.base import AnalysisState, clip, register_correlator, service_of
from diagnostics.agent.findings import Finding, Remedy, Severity

LATENCY_KINDS = ("slow_endpoint", "high_latency")


@register_correlator
def cpu_bound_latency(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """A process burning CPU while requests are slow, whichever output comes first: the busy process
    most likely makes them slow (it and its callers wait for CPU), so it is the cause to fix."""
    busy = state.fact_dict("cpu_saturated")  # service -> the finding's summary
    slow = state.fact_dict("slow_services")  # service -> the finding's summary
    for finding in findings:
        if finding.kind == "cpu_saturation" and finding.remedy is not None:
            busy.setdefault(finding.remedy.target or service_of(finding.subject), finding.summary)
        elif finding.kind in LATENCY_KINDS:
            slow.setdefault(service_of(finding.subject) or "the service", finding.summary)
    reported = state.fact_set("cpu_bound_latency")
    out = []
    for service, usage in busy.items():
        if not slow or service in reported:
            continue
        reported.add(service)
        example = slow.get(service) or next(iter(slow.values()))
        out.append(
            Finding(
                "cpu_bound_latency",
                f"{service} is busy on CPU while requests are slow in {', '.join(sorted(slow))}: the CPU use "
                f"of {service} most likely makes them slow ({clip(usage, 100)}; {clip(example, 120)}).",
                Severity.CRITICAL,
                f"process/{service}",
                clip(usage),
                80,
                f"Find what {service} is busy with (a busy loop, a runaway thread); restart it if stuck.",
                Remedy(("restart",), service, {}, f"restart {service}"),
            )
        )
    return out
