"""Resources against their limits -> which quota, node or CPU limit is the bottleneck: an exceeded
ResourceQuota (the controller's 'exceeded quota' message, a quota at its hard limit), a node whose
requests fill its allocatable resources, a container throttled against its CPU limit.

Facts it keeps on the state: ``cpu_limits`` (pod name -> the CPU limit of its containers) and
``throttled`` (pod or container name -> throttled fraction), joined by the ``throttled_at_limit``
correlator whichever output comes first.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    describe_tree,
    field_value,
    looks_like_describe,
    parse_table,
    quantity,
    register,
    register_correlator,
)
from diagnostics.agent.findings import Finding, ObjRef, Remedy, Severity

_EXCEEDED = rx.compile(
    r"exceeded quota: (?P<quota>[\w.-]+), requested: (?P<requested>[^,\n]+), used: (?P<used>[^,\n]+), "
    r"limited: (?P<limited>[^\n\"]+)"
)
_QUOTA_PAIR = rx.compile(r"([a-z][\w./-]*): ([\d.]+[A-Za-z]*)/([\d.]+[A-Za-z]*)")
_ALLOCATED = rx.compile(
    r"^\s*(cpu|memory|ephemeral-storage|nvidia\.com/gpu)\s+(\S+)\s+\((\d+)%\)", rx.MULTILINE
)
NEAR_FULL = 0.9


def _ratio(used: str, hard: str) -> float | None:
    u, h = quantity(used), quantity(hard)
    if u is None or not h:
        return None
    return u / h


_KIND_WORD = {"replicaset": "ReplicaSet", "statefulset": "StatefulSet", "daemonset": "DaemonSet"}


@register
class QuotaAnalyzer(Analyzer):
    """'exceeded quota' messages anywhere; ResourceQuota listings and describes at their limits."""

    name = "resource_quota"

    def applies(self, out: ToolOutput) -> bool:
        return (
            "exceeded quota" in out.text
            or "quota" in str(out.params.get("kind", "")).lower()
            or ("Resource" in out.text and "Hard" in out.text and "Used" in out.text)
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        findings: list[Finding] = []
        seen: set[str] = set()
        namespace = str(out.params.get("namespace") or "")
        for match in _EXCEEDED.finditer(out.text):
            quota = match["quota"]
            if quota in seen:
                continue
            seen.add(quota)
            kind = str(out.params.get("kind") or out.params.get("resource_type") or "")
            name = str(out.params.get("name") or out.params.get("resource_name") or "")
            kind = _KIND_WORD.get(kind.lower(), kind.capitalize())
            who = f"{kind} {name} cannot create pods" if kind and name else "New pods are forbidden"
            count = (
                " (an object count: non-terminal pods)"
                if match["limited"].strip().startswith("pods=")
                else ""
            )
            findings.append(
                Finding(
                    "quota_exceeded",
                    f"{who} because the ResourceQuota {quota} is exceeded{count}: a pod requests "
                    f"{match['requested'].strip()}, but {match['used'].strip()} is already in use of the "
                    f"hard limit {match['limited'].strip()} the quota allows.",
                    Severity.CRITICAL,
                    f"resourcequota/{namespace}/{quota}" if namespace else f"resourcequota/{quota}",
                    clip(match.group(0)),
                    90,
                    f"Raise the hard limit of ResourceQuota {quota}, lower the pods' requests/limits, or "
                    "free capacity in the namespace.",
                )
            )
        table = parse_table(out.text)
        rows: list[tuple[str, str]] = []
        if table is not None and ("REQUEST" in table.header or "LIMIT" in table.header):
            for line in out.text.splitlines():
                name = line.split()[0] if line.split() else ""
                rows += [(name, line)] if _QUOTA_PAIR.search(line) else []
        elif looks_like_describe(out.text) and "Hard" in out.text:
            name = field_value(out.text, "Name")
            for line in out.text.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] not in ("Resource", "--------"):
                    rows.append((name, f"{parts[0]}: {parts[1]}/{parts[2]}"))
        for name, line in rows:
            for resource, used, hard in _QUOTA_PAIR.findall(line):
                ratio = _ratio(used, hard)
                if ratio is None or ratio < NEAR_FULL or name in seen:
                    continue
                full = ratio >= 1
                findings.append(
                    Finding(
                        "quota_full" if full else "quota_near_full",
                        f"ResourceQuota {name} is {'at' if full else 'near'} its hard limit for {resource}: "
                        f"{used} used of {hard} ({ratio:.0%}); pods that need more are refused.",
                        Severity.CRITICAL if full else Severity.WARNING,
                        f"resourcequota/{namespace}/{name}" if namespace else f"resourcequota/{name}",
                        clip(line),
                        75 if full else 45,
                        f"Raise the {resource} hard limit of ResourceQuota {name} or reduce what the "
                        "namespace requests.",
                    )
                )
        return findings


@register
class NodeAllocationAnalyzer(Analyzer):
    """kubectl describe node: requests against allocatable ('Allocated resources')."""

    name = "node_allocation"

    def applies(self, out: ToolOutput) -> bool:
        return "Allocated resources:" in out.text and "Allocatable:" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        node = field_value(out.text, "Name") or str(out.params.get("name") or "")
        section = out.text.split("Allocated resources:", 1)[1]
        findings: list[Finding] = []
        for resource, requested, percent in _ALLOCATED.findall(section):
            share = int(percent) / 100
            if share < NEAR_FULL:
                continue
            findings.append(
                Finding(
                    "node_overcommitted",
                    f"Node {node}: {resource} requests are at {percent}% of its allocatable {resource} "
                    f"({requested} requested), so the node is full and the cluster cannot tolerate a node "
                    "failure (its pods would not fit elsewhere).",
                    Severity.CRITICAL if share >= 1 else Severity.WARNING,
                    f"node/{node}",
                    clip(f"{resource} {requested} ({percent}%)"),
                    80,
                    f"Add a node or capacity, or lower the {resource} requests of the pods on {node}.",
                )
            )
        return findings


_PRESSURE = {
    "DiskPressure": "disk (ephemeral-storage)",
    "MemoryPressure": "memory",
    "PIDPressure": "process IDs",
}
_RECLAIM = rx.compile(r"Attempting to reclaim ([\w.-]+)")


@register
class NodeConditionsAnalyzer(Analyzer):
    """kubectl describe node: a pressure condition that is True, or a node that is not Ready. Under
    pressure the kubelet evicts pods, so the node's pods are listed next (``pressured_nodes``)."""

    name = "node_conditions"

    def applies(self, out: ToolOutput) -> bool:
        # kubectl describe node (a node has no namespace line, so not looks_like_describe)
        return rx.search(r"^Name:\s+\S+\n(?:.*\n)*?Roles:", out.text, rx.MULTILINE) is not None and (
            "Conditions:" in out.text
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        node = field_value(out.text, "Name") or str(out.params.get("name") or "")
        section = out.text.split("Conditions:", 1)[1].split("\nAddresses:", 1)[0]
        reclaim = _RECLAIM.search(out.text)
        taints = field_value(out.text, "Taints")
        findings: list[Finding] = []
        for line in section.splitlines():
            parts = rx.split(r"\s{2,}", line.strip())
            if len(parts) < 3:
                continue
            condition, status, message = parts[0], parts[1], parts[-1]
            if condition in _PRESSURE and status == "True":
                low = reclaim.group(1) if reclaim else _PRESSURE[condition]
                state.fact_set("pressured_nodes").add(node)
                state.lead(ObjRef("pod", "*"), f"pods on node {node}, which evicts them", 75)
                findings.append(
                    Finding(
                        "node_pressure",
                        f"Node {node} is under {condition} ({message}; low on {low}): the kubelet evicts "
                        f"its pods to reclaim {low}"
                        + (f", and the node is tainted {taints}" if taints and taints != "<none>" else "")
                        + ".",
                        Severity.CRITICAL,
                        f"node/{node}",
                        clip(line.strip()),
                        82,
                        f"Free {low} on {node} (or add capacity), and set requests and limits for it on "
                        "the pods that use the most.",
                    )
                )
            elif condition == "Ready" and status != "True":
                findings.append(
                    Finding(
                        "node_not_ready",
                        f"Node {node} is not Ready (Ready={status}: {message}).",
                        Severity.CRITICAL,
                        f"node/{node}",
                        clip(line.strip()),
                        80,
                    )
                )
        return findings


def _pod_of(name: str) -> str:
    return name.strip().lower()


@register
class CpuLimitAnalyzer(Analyzer):
    """A pod's CPU limits (from its describe) and its CPU use (kubectl top pods) against them."""

    name = "cpu_limits"

    def applies(self, out: ToolOutput) -> bool:
        return ("Limits:" in out.text and "Containers:" in out.text) or "CPU(cores)" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        limits = state.fact_dict("cpu_limits")
        if "CPU(cores)" in out.text:
            return self._usage(out, state, limits)
        if not looks_like_describe(out.text):
            return []
        tree = describe_tree(out.text)
        pod = tree.get("Name")
        containers = tree.child("Containers")
        for container in containers.children if containers else []:
            node = container.child("Limits")
            cpu = node.get("cpu") if node else ""
            if cpu:
                limits[_pod_of(pod)] = cpu
                limits[_pod_of(container.key)] = cpu
                probes = state.fact_dict("probe_timeouts")
                for probe in ("Liveness", "Readiness", "Startup"):
                    timeout = rx.search(r"timeout=(\d+s)", container.get(probe))
                    if timeout:
                        probes[f"{_pod_of(pod)} {probe.lower()}"] = (container.key, timeout.group(1), cpu)
                # Which container the limit is on (the throttled one when it is the only limited one).
                owners = state.fact_dict("cpu_limit_containers")
                owners[_pod_of(pod)] = "" if _pod_of(pod) in owners else container.key
        return []

    @staticmethod
    def _usage(out: ToolOutput, state: AnalysisState, limits: dict[str, str]) -> list[Finding]:
        findings: list[Finding] = []
        for line in out.text.splitlines():
            parts = line.split()
            for i, part in enumerate(parts[:-1]):
                used = quantity(part) if rx.fullmatch(r"\d+m", part) else None
                if used is None or i == 0:
                    continue
                pod = parts[i - 1]
                limit = limits.get(_pod_of(pod))
                limit_cores = quantity(limit) if limit else None
                if limit_cores and used / limit_cores >= NEAR_FULL:
                    state.fact_dict("throttled").setdefault(_pod_of(pod), used / limit_cores)
                    findings.append(
                        Finding(
                            "cpu_at_limit",
                            f"Pod {pod} uses {part} CPU, {used / limit_cores:.0%} of its CPU limit of "
                            f"{limit}: it is CPU throttled against the limit.",
                            Severity.WARNING,
                            pod,
                            clip(line),
                            75,
                            f"Raise the CPU limit of {pod} (now {limit}) or reduce its CPU use.",
                            Remedy(("increase_cpu_limit",), pod, {}, "raise the CPU limit"),
                        )
                    )
                break
        return findings


@register_correlator
def throttled_at_limit(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """Throttling (a metric) and the CPU limit (the pod spec) together: the container hits its limit."""
    throttled = state.fact_dict("throttled")
    for finding in findings:
        if finding.kind == "cpu_throttling" and finding.subject:
            ratio = rx.search(r"ratio ([\d.]+)", finding.evidence)
            throttled.setdefault(_pod_of(finding.subject), float(ratio.group(1)) if ratio else 1.0)
    limits = state.fact_dict("cpu_limits")
    reported = state.fact_set("throttling_reported")
    out: list[Finding] = []
    for target, ratio in throttled.items():
        limit = limits.get(target)
        if not limit or target in reported:
            continue
        reported.add(target)
        container = state.fact_dict("cpu_limit_containers").get(target, "")
        who = f"Container {container} of pod {target}" if container and container != target else target
        out.append(
            Finding(
                "cpu_throttled_at_limit",
                f"{who} is CPU throttled: it hits its CPU limit of {limit}, which is below what it needs "
                f"— about {ratio:.0%} of its CPU periods are throttled, which slows it down.",
                Severity.CRITICAL,
                target,
                f"limit {limit}, throttled {ratio:.2f}",
                84,
                f"Raise the CPU limit of {target} above {limit} (or remove it), or make it use less CPU.",
                Remedy(("increase_cpu_limit",), target, {}, "raise the CPU limit"),
            )
        )
    return out


@register_correlator
def failed_creates(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """A workload that cannot create pods: look at the namespace's quotas and limit ranges."""
    for finding in findings:
        if finding.kind in ("replica_failure", "quota_exceeded") or "FailedCreate" in finding.evidence:
            parts = finding.subject.split("/")
            if len(parts) == 3:
                for kind in ("resourcequota", "limitrange"):
                    state.lead(ObjRef(kind, "*", parts[1]), "quotas and limits that refuse pods", 78)
    return []


_TIMED_OUT = rx.compile(
    r"the (\w+) probe is failing .*(?:deadline exceeded|timeout|timed out)", rx.IGNORECASE
)
_CONSEQUENCE = {
    "liveness": "so the kubelet kills and restarts it",
    "startup": "so the kubelet kills and restarts it",
    "readiness": "so the pod is taken out of its Services",
}


@register_correlator
def probe_timeout_under_throttling(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """A probe that times out while its container runs at its CPU limit: the CFS quota throttles the
    process, so it answers the probe too late (the probe's timeoutSeconds), not because the endpoint fails."""
    timed_out = state.fact_dict("probes_timed_out")
    for finding in findings:
        match = _TIMED_OUT.search(finding.summary)
        if finding.kind == "probe_failed" and match and finding.subject.startswith("pod/"):
            timed_out.setdefault(_pod_of(finding.subject.rsplit("/", 1)[-1]), set()).add(
                match.group(1).lower()
            )
    throttled = state.fact_dict("throttled")
    reported = state.fact_set("probe_throttling_reported")
    out: list[Finding] = []
    for pod, probes in timed_out.items():
        if pod not in throttled or pod in reported:
            continue
        probe = "liveness" if "liveness" in probes else sorted(probes)[0]
        container, timeout, limit = state.fact_dict("probe_timeouts").get(f"{pod} {probe}", ("", "", ""))
        if not container:
            continue
        reported.add(pod)
        out.append(
            Finding(
                "probe_timeout_throttled",
                f"The {probe} probe of container {container} (pod {pod}) times out (timeout {timeout}) "
                f"because the container is CPU throttled at its {limit} limit "
                f"(it uses {throttled[pod]:.0%} of it), "
                f"{_CONSEQUENCE.get(probe, '')}: the endpoint is not broken, the process is starved of CPU.",
                Severity.CRITICAL,
                f"pod/{pod}",
                f"{probe} timeout={timeout}; CPU at {throttled[pod]:.0%} of {limit}",
                86,
                f"Raise the CPU limit of {container} (now {limit}) or the probe's timeoutSeconds.",
            )
        )
    return out
