"""``kubectl describe`` of pods, workloads, jobs and PVCs -> findings: pods (pods.py), workloads and jobs
(workloads.py), PVCs (volumes.py), CronJobs (schedules.py), PodDisruptionBudgets (disruption.py), what
they share about containers (containers.py), any other object's status conditions and Ingress
backends (conditions.py), limits a LimitRange defaulted (limits.py), objects read as manifests
(manifests.py) and a stuck rollout chained to its new
pods (rollouts.py); a DaemonSet's node coverage (daemonsets.py), NetworkPolicies that isolate a failing
pod's egress (netpolicy.py), an Ingress's TLS Secret (ingress_tls.py) and pods preempted by higher
priority (preemption.py); what a pod's lineage relates to it (lineage_refs.py) and the NetworkPolicy
that does not admit a failing client (netpolicy_ingress.py)."""

from diagnostics.agent.evidence.analyzers.kubernetes import (  # noqa: F401  (registration)
    conditions,
    config_refs,
    controllers,
    daemonsets,
    disruption,
    ingress_tls,
    limits,
    lineage_refs,
    manifests,
    netpolicy,
    pods,
    preemption,
    probes,
    rollouts,
    schedules,
    scrape,
    topology,
    volumes,
    workloads,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.pods import PodDescribeAnalyzer
from diagnostics.agent.evidence.analyzers.kubernetes.volumes import PvcDescribeAnalyzer
from diagnostics.agent.evidence.analyzers.kubernetes.workloads import (
    JobDescribeAnalyzer,
    WorkloadDescribeAnalyzer,
)

__all__ = [
    "JobDescribeAnalyzer",
    "PodDescribeAnalyzer",
    "PvcDescribeAnalyzer",
    "WorkloadDescribeAnalyzer",
    "workload_of",
]
