"""``kubectl describe`` of deployments, stateful sets, daemon sets, replica sets and jobs -> missing
replicas, stuck rollouts, failed job pods, and the leads they give (the new replica set, quotas, pods)."""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    describe_tree,
    looks_like_describe,
    parse_events,
    register,
)
from diagnostics.agent.evidence.analyzers.events import event_findings
from diagnostics.agent.evidence.analyzers.kubernetes.containers import command_findings, containers_of
from diagnostics.agent.findings import Finding, ObjRef, Severity


@register
class WorkloadDescribeAnalyzer(Analyzer):
    """Deployments, stateful sets, daemon sets and replica sets (and their pod templates)."""

    name = "k8s_workload_describe"

    def applies(self, out: ToolOutput) -> bool:
        return looks_like_describe(out.text) and bool(
            rx.search(r"^\s*\"?Replicas:.*desired", out.text, rx.MULTILINE)
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        tree = describe_tree(out.text)
        kind = str(out.params.get("kind") or "deployment")
        obj = ObjRef(kind, tree.get("Name"), tree.get("Namespace"))
        state.fact_set("namespaces").add(obj.namespace)
        findings: list[Finding] = []
        replicas = tree.get("Replicas")
        counts = dict(
            (v, int(n))
            for n, v in rx.findall(r"(\d+) (desired|updated|total|available|unavailable)", replicas)
        )
        desired = counts.get("desired", 0)
        # A StatefulSet's describe prints no "available" count ("3 desired | 3 total"): its pods' states
        # ("Pods Status: 3 Running / ...") say how many run.
        running = rx.search(r"(\d+) Running", tree.get("Pods Status"))
        available = counts.get("available", int(running.group(1)) if running else 0)
        if desired and available < desired:
            findings.append(
                Finding(
                    "replicas_unavailable",
                    f"{kind.capitalize()} {obj.name} has {available}/{desired} replicas available "
                    f"({counts.get('unavailable', desired - available)} unavailable).",
                    Severity.CRITICAL if available == 0 else Severity.WARNING,
                    obj.label,
                    f"Replicas: {replicas}",
                    30,
                )
            )
        if "desired" in counts and desired == 0 and kind != "replicaset":
            # spec.replicas 0: the controller keeps no pod, so whatever selects its pods (a Service) has
            # no endpoints; the scaling event says when (and from how many) it was scaled down.
            scaled = rx.search(r"Scaled down replica set \S+ to 0(?: from (\d+))?", out.text)
            was = f" (scaled down to 0 from {scaled.group(1)})" if scaled and scaled.group(1) else ""
            findings.append(
                Finding(
                    "scaled_to_zero",
                    f"{kind.capitalize()} {obj.name} is scaled to 0 replicas (desired 0){was}: it runs no "
                    "pods, so a Service that selects them has no endpoints and every request or probe to it "
                    "fails.",
                    Severity.CRITICAL,
                    obj.label,
                    f"Replicas: {replicas}",
                    76,
                    f"Scale {kind} {obj.name} back up (spec.replicas), if 0 was not intended.",
                )
            )
        conditions = out.text
        if "ProgressDeadlineExceeded" in conditions:
            findings.append(
                Finding(
                    "rollout_stuck",
                    f"{kind.capitalize()} {obj.name}: the rollout did not progress "
                    "(ProgressDeadlineExceeded).",
                    Severity.WARNING,
                    obj.label,
                    "ProgressDeadlineExceeded",
                    25,
                )
            )
        for container in containers_of(tree, "Containers"):
            findings += command_findings(container, obj, state)
            for section in ("Requests", "Limits"):
                node = container.child(section)
                for res in node.children if node else []:
                    if "gpu" in res.key.lower():
                        state.fact_dict("gpu_requests")[obj.label] = f"{res.value} {res.key}"
        new_rs = rx.search(r"NewReplicaSet:\s+(\S+)", out.text)
        if new_rs and new_rs.group(1) != "<none>":
            state.related.add(new_rs.group(1).lower())
            after = out.text[new_rs.end() : new_rs.end() + 40]
            created = rx.search(r"\((\d+)/(\d+) replicas created\)", after)
            short = created is not None and int(created.group(1)) < int(created.group(2))
            if ((desired and available < desired) or short) and obj.namespace:
                # The replica set's events say why pods are missing (quota, admission, limits).
                state.lead(ObjRef("replicaset", new_rs.group(1), obj.namespace), "the new replica set", 80)
        if rx.search(r"ReplicaFailure\s+True\s+FailedCreate", out.text) and obj.namespace:
            for kind in ("resourcequota", "limitrange"):
                state.lead(ObjRef(kind, "*", obj.namespace), "pods cannot be created: quotas and limits", 78)
        findings += event_findings(parse_events(out.text), obj, state, workload=obj.name)
        if desired and available >= desired and not any(f.is_problem for f in findings):
            findings.append(
                Finding(
                    "workload_available",
                    f"{kind.capitalize()} {obj.name} has all {desired} replicas available.",
                    Severity.INFO,
                    obj.label,
                    f"Replicas: {replicas}",
                    5,
                )
            )
        return findings


@register
class JobDescribeAnalyzer(Analyzer):
    name = "k8s_job_describe"

    def applies(self, out: ToolOutput) -> bool:
        return looks_like_describe(out.text) and "Pods Statuses:" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        tree = describe_tree(out.text)
        obj = ObjRef("job", tree.get("Name"), tree.get("Namespace"))
        state.fact_set("namespaces").add(obj.namespace)
        findings: list[Finding] = []
        statuses = tree.get("Pods Statuses")
        failed = rx.search(r"(\d+) Failed", statuses)
        if failed and int(failed.group(1)) > 0:
            findings.append(
                Finding(
                    "job_failed",
                    f"Job {obj.name} has {failed.group(1)} failed pod(s) ({statuses}).",
                    Severity.CRITICAL,
                    obj.label,
                    f"Pods Statuses: {statuses}",
                    35,
                )
            )
        deadline = rx.fullmatch(r"(\d+)s?", tree.get("Active Deadline Seconds").strip())
        if deadline:
            state.fact_dict("job_deadlines")[obj.label] = f"{deadline.group(1)} seconds"
        for created in rx.findall(r"Created pod: (\S+)", out.text):
            state.lead(ObjRef("pod", created, obj.namespace), f"pod of job {obj.name}", 75)
        for container in containers_of(tree, "Containers"):
            findings += command_findings(container, obj, state)
        findings += event_findings(parse_events(out.text), obj, state, workload=obj.name)
        return findings
