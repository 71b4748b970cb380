"""A language runtime that sizes its parallelism from the node, not from the container's CPU limit.

A CPU limit is a CFS quota: ``limit x period`` of CPU time per 100 ms period, however many threads use it.
The Go runtime sets ``GOMAXPROCS`` from the CPUs it sees (before Go 1.25, the node's CPU count, not the
cgroup's quota), so a Go process on a 48-CPU node under a limit of 1 runs up to 48 threads at once, spends
its quota in a few milliseconds of each period and is throttled for the rest: latency rises while its
average CPU use looks like "at the limit". The runtime says the value itself (a start-up line
``GOMAXPROCS=N``, the ``GOMAXPROCS`` environment variable, the ``go_sched_gomaxprocs_threads`` metric).
This correlator ties that value to a container the analyzers found throttled at its limit.
"""

from __future__ import annotations

import json
import math
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, register_correlator
from diagnostics.agent.evidence.analyzers.resources import quantity
from diagnostics.agent.findings import Finding, Severity

_GOMAXPROCS = rx.compile(r"\bGOMAXPROCS[=:\s]+(\d+)")
_NUM_CPU = rx.compile(r"\bNumCPU[=:\s]+(\d+)")
_CAPACITY_CPU = rx.compile(r"^Capacity:\s*$(?:\n\s+[\w./-]+:\s+\S+)*?\n\s+cpu:\s+(\d+)", rx.MULTILINE)


def _metric_values(text: str, name: str) -> dict[str, int]:
    """pod -> value of a Prometheus instant-query result (HTTP API JSON) whose query or name is ``name``."""
    stripped = text.strip()
    if name not in stripped or stripped[:1] != "{":
        return {}
    try:
        data = json.loads(stripped)
    except ValueError:
        return {}
    result = data.get("data", {}).get("result") if isinstance(data, dict) else None
    found: dict[str, int] = {}
    for item in result if isinstance(result, list) else []:
        metric: dict[str, Any] = item.get("metric") or {} if isinstance(item, dict) else {}
        query = str(item.get("query") or metric.get("__name__") or "")
        value = item.get("value")
        if name in query and metric.get("pod") and isinstance(value, list) and len(value) == 2:
            try:
                found[str(metric["pod"])] = int(float(value[1]))
            except (TypeError, ValueError):
                continue
    return found


def runtime_procs(state: AnalysisState, pod: str) -> tuple[int, str, int]:
    """(GOMAXPROCS, where it was read, the CPU count the runtime saw or 0) for ``pod``; 0 when unknown."""
    for out in state.outputs:
        if out.is_log and str(out.params.get("pod_name") or "").lower() == pod:
            match = _GOMAXPROCS.search(out.text)
            if match:
                cpus = _NUM_CPU.search(out.text)
                return int(match.group(1)), "its log", int(cpus.group(1)) if cpus else 0
        elif "go_sched_gomaxprocs" in out.text:
            value = _metric_values(out.text, "go_sched_gomaxprocs").get(pod)
            if value:
                return value, "go_sched_gomaxprocs_threads", 0
        elif out.text.lstrip().startswith("Name:") and pod in out.text[:300]:
            env = rx.search(r"^\s+GOMAXPROCS:\s+(\d+)\s*$", out.text, rx.MULTILINE)
            if env:
                return int(env.group(1)), "its environment", 0
    return 0, "", 0


def _node_cpus(state: AnalysisState) -> int:
    for out in state.outputs:
        match = _CAPACITY_CPU.search(out.text) if "Capacity:" in out.text else None
        if match:
            return int(match.group(1))
    return 0


@register_correlator
def parallelism_above_cpu_limit(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    limits = state.fact_dict("cpu_limits")
    reported = state.fact_set("parallelism_reported")
    out: list[Finding] = []
    for pod in list(state.fact_dict("throttled")):
        limit = limits.get(pod)
        cores = quantity(limit) if limit else None
        procs, source, seen = runtime_procs(state, pod)
        if not cores or procs <= math.ceil(cores) or pod in reported:
            continue
        reported.add(pod)
        container = state.fact_dict("cpu_limit_containers").get(pod) or pod
        node = seen or _node_cpus(state)
        whose = (
            ", the node's CPU count" if node == procs else (f" (the node has {node} CPUs)" if node else "")
        )
        out.append(
            Finding(
                "parallelism_above_cpu_limit",
                f"The Go runtime of {container} (pod {pod}) runs with GOMAXPROCS={procs}{whose}, under a CPU "
                f"limit of {limit}: up to {procs} threads spend the quota early in each CFS period, so the "
                "container is throttled in most periods and latency rises even though its average CPU use "
                "is only at the limit. GOMAXPROCS should match the limit.",
                Severity.CRITICAL,
                pod,
                f"GOMAXPROCS={procs} ({source}); CPU limit {limit}",
                86,
                f"Set GOMAXPROCS to {max(1, math.floor(cores))} for {container} (an environment variable, or "
                "automaxprocs; Go 1.25+ reads the cgroup limit), or raise the CPU limit.",
            )
        )
    return out
