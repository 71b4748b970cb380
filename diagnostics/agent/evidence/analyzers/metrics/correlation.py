"""Across outputs: a process busy on CPU while requests are slow is the cause of the latency; a service
whose own 'slow request' lines are a share of the requests its counter saw is slow (``slow_share``)."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers.base import AnalysisState, clip, register_correlator, service_of
from diagnostics.agent.findings import Finding, Remedy, Severity

LATENCY_KINDS = ("slow_endpoint", "high_latency")
SLOW_SHARE = 0.1  # of the requests, flagged slow by the service itself: a latency problem


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


@register_correlator
def slow_share(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """Requests the service itself logs as slow (by its own threshold), counted against the requests its
    metrics counted: a request counter counts since its process started, and the slow lines of that same
    process cover the same span. Two or more that are a tenth of the requests are a latency problem, however
    few lines the log holds; a service already found slow is left as found."""
    slow_lines = state.fact_dict("slow_lines")  # subject -> (slow lines of the current process, example)
    counts = state.fact_dict("request_counts")  # service -> (requests since process start, p50 ms)
    slow = state.fact_dict("slow_services")
    for finding in findings:
        if finding.kind in LATENCY_KINDS:
            slow.setdefault(service_of(finding.subject) or "the service", finding.summary)
    reported = state.fact_set("slow_share")
    out = []
    for subject, (lines, example) in slow_lines.items():
        service = service_of(subject)
        requests, p50 = counts.get(service, (0.0, None))
        if (
            service in slow
            or service in reported
            or lines < 2
            or not requests
            or lines < SLOW_SHARE * requests
        ):
            continue
        reported.add(service)
        median = f", median {p50:.0f} ms" if p50 is not None else ""
        out.append(
            Finding(
                "high_latency",
                f"High latency in {service}: {lines} of the {requests:.0f} requests its metrics counted "
                f"since its process started are logged as slow by its own threshold "
                f"({lines / requests:.0%}{median}; '{clip(example, 100)}').",
                Severity.WARNING,
                subject,
                example,
                58,
                f"Find what makes {service} slow (a dependency, a cache, a recent change).",
            )
        )
    return out
