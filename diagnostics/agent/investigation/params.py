"""Filling a tool's parameters from an object, and an action's arguments from a finding's remedy.

The analyzers-only planner works from tool specs, not from tool names it knows in advance.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent.findings import Finding, ObjRef
from diagnostics.agent.request.alert_kinds import CUSTOM_KINDS
from diagnostics.toolsets.base import ToolSpec

DEFAULT_KINDS = ("pod", "deployment", "job", "statefulset", "daemonset")
WORKLOAD_KINDS = {"deployment", "statefulset", "daemonset", "job", "cronjob", "replicaset"}
CLUSTER_KINDS = {
    "node",
    "namespace",
    "persistentvolume",
    "storageclass",
    "clusterissuer",
    "clustersecretstore",
    "clusterpolicy",
    "clusterrole",
    "clusterrolebinding",
    "ingressclass",
    "csinode",
}
K8S_KINDS = (
    WORKLOAD_KINDS
    | CLUSTER_KINDS
    | {
        "pod",
        "service",
        "persistentvolumeclaim",
        "configmap",
        "secret",
        "horizontalpodautoscaler",
        "networkpolicy",
        "ingress",
        "poddisruptionbudget",
        "resourcequota",
        "limitrange",
        "role",
        "rolebinding",
        "serviceaccount",
    }
)
NAME_PARAMS = {
    "service",
    "service_name",
    "process",
    "process_name",
    "target",
    "container",
    "workload",
    "app",
    "component",
    "program",
}
GENERIC_TOKENS = {
    "kubectl",
    "get",
    "fetch",
    "list",
    "by",
    "in",
    "of",
    "the",
    "and",
    "to",
    "name",
    "kind",
    "find",
    "resource",
    "describe",
    "logs",
    "log",
    "pod",
    "pods",
    "all",
    "namespace",
    "cluster",
    "events",
    "previous",
    "top",
    "nodes",
    "node",
    "yaml",
    "lineage",
    "children",
    "status",
    "check",
    "app",
}
OVERVIEW_WORDS = ("status", "health", "overview", "processes", "summary", "alerts", "targets")
TOPIC_LISTS = {
    "scaling": ("horizontalpodautoscaler", "scaledobject"),
    "dns": ("networkpolicy", "service"),
    "storage": ("persistentvolumeclaim",),
    # A service that is down or unreachable: what is on the network path to it.
    "network": ("pod", "service", "networkpolicy"),
    "quota": ("resourcequota", "limitrange"),
}
# PromQL a query tool runs for an alert of each topic (besides the alert's own expression). They name
# no metric of any one system: a latency histogram is any ``*_duration_seconds_bucket``, grouped by
# whichever endpoint label it has, so they work on any Prometheus.
TOPIC_QUERIES = {
    "latency": (
        "topk(5, histogram_quantile(0.95, sum by (le, job, service, route, handler, endpoint, path) "
        '(rate({__name__=~".+_duration_seconds_bucket"}[5m]))))'
    ),
    "errors": (
        "topk(5, sum by (job, service, route, handler, code) "
        '(rate({__name__=~".+_requests_total", code=~"5.."}[5m])))'
    ),
    "network": "up == 0",
    "cpu": (
        "topk(5, sum by (namespace, pod, container) (rate(container_cpu_cfs_throttled_periods_total[5m])) "
        "/ sum by (namespace, pod, container) (rate(container_cpu_cfs_periods_total[5m])))"
    ),
}
# Topics that are about the cluster's capacity: with no namespace, look at the nodes.
CLUSTER_TOPICS = ("quota", "memory", "cpu")


# A pod's lineage (kube-lineage): the Services that select it, the Ingresses routing to those, the
# NetworkPolicies and PodDisruptionBudgets that select it, its events. Read after the pod's describe and
# logs (its own evidence), before its previous logs and events: a policy or an ingress that only the
# lineage shows is otherwise reached only through a namespace listing. A Service's lineage shows the
# Ingresses routing to it.
LINEAGE_WEIGHTS = {"pod": 62, "service": 50}


def props_of(spec: ToolSpec) -> dict[str, Any]:
    props = spec.parameters.get("properties") or {}
    return props if isinstance(props, dict) else {}


def required_of(spec: ToolSpec) -> list[str]:
    return [str(p) for p in spec.parameters.get("required") or []]


def tool_weight(tool: str, kind: str) -> int:
    name = tool.lower()
    if "describe" in name:
        return 100
    if "previous" in name:
        return 55
    if "log" in name:
        return 92
    if "lineage" in name or "children" in name:
        return LINEAGE_WEIGHTS.get(kind, 88 if kind in WORKLOAD_KINDS else 0)
    if "trace" in name or "app_get" in name:
        return 88
    if "diff" in name or "manifest" in name:
        return 70
    if "event" in name:
        return 45
    if "yaml" in name:
        return 30
    if "get" in name:
        return 50
    return 60


def fill_params(spec: ToolSpec, obj: ObjRef) -> dict[str, Any] | None:
    """The parameters that make ``spec`` about ``obj``, or None when it cannot be about it."""
    props = props_of(spec)
    required = required_of(spec)
    params: dict[str, Any] = {}
    is_k8s = obj.kind in K8S_KINDS or obj.kind in CUSTOM_KINDS
    for name in required:
        if name in ("kind", "resource_type"):
            value: Any = obj.kind if is_k8s else None
        elif name in ("name", "resource_name"):
            value = obj.name if is_k8s else None
        elif name == "pod_name":
            value = obj.name if obj.kind == "pod" else None
        elif name == "namespace":
            # A cluster-scoped object has no namespace; kubectl ignores the flag for it.
            value = obj.namespace or ("" if obj.kind in CLUSTER_KINDS and obj.name != "*" else None)
        elif name == "app_name":
            value = obj.name if obj.kind == "application" else None
        elif name == "trace_id":
            value = obj.name if obj.kind == "trace" else None
        elif name == "url":
            value = obj.name if obj.kind == "url" else None
        elif name in NAME_PARAMS:
            value = obj.name if obj.kind not in ("trace", "application", "url") else None
        else:
            value = (props.get(name) or {}).get("default") if isinstance(props.get(name), dict) else None
        if value is None or (value == "" and name != "namespace"):
            return None
        params[name] = value
    if not required:
        return None
    for name, schema in props.items():
        if name not in params and isinstance(schema, dict) and "default" in schema:
            params[name] = schema["default"]
    return params


def fill_action_args(spec: ToolSpec, finding: Finding) -> dict[str, Any] | None:
    assert finding.remedy is not None
    remedy = finding.remedy
    parts = finding.subject.split("/")
    namespace = parts[1] if len(parts) == 3 else ""
    args: dict[str, Any] = {}
    props = props_of(spec)
    for name in props:
        if name in remedy.args:
            args[name] = remedy.args[name]
        elif name in NAME_PARAMS or name in ("name", "deployment", "resource", "resource_name"):
            args[name] = remedy.target
        elif name == "namespace" and namespace:
            args[name] = namespace
        elif isinstance(props[name], dict) and len(props[name].get("enum") or []) == 1:
            args[name] = props[name]["enum"][0]  # the only value the action accepts
    if any(name not in args for name in required_of(spec)):
        return None
    return args


def enumerated_services(tools: Any) -> list[str]:
    """The closed list of service names the tools accept (e.g. the lab's), in order; else []."""
    names: list[str] = []
    for spec in tools:
        schema = props_of(spec).get("service")
        if "service" in required_of(spec) and isinstance(schema, dict):
            names += [str(v) for v in schema.get("enum") or [] if str(v) not in names]
    return names
