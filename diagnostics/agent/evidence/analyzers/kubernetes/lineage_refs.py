"""What a pod's or a Service's lineage tree (kube-lineage) relates to it, each read on its own.

A pod's lineage lists the objects that depend on it: the Services whose selector matches it (and under
each, its EndpointSlices and the Ingresses routing to it), the NetworkPolicies and PodDisruptionBudgets
that select it, the HorizontalPodAutoscalers of its workload, its events. A pod's describe names its
owner (``Controlled By: ReplicaSet/x``), a ReplicaSet's its Deployment (a ReplicaSet named
``<deployment>-<pod-template-hash>`` is a Deployment's: that Deployment is read at once): the chain up
is read from there when the pod is not ready (after the rest: its reads are many). Each related object
is led to at a priority below the pod's own evidence; NetworkPolicies are netpolicy.py's (read by their
rules).
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    field_value,
    looks_like_describe,
    register,
)
from diagnostics.agent.findings import Finding, ObjRef

_ROOT = rx.compile(r"(?m)^(Pod|Service)/([a-z0-9][-a-z0-9.]*)\s")
_RELATED = rx.compile(
    r"(?m)^[│ ]*[├└]──\s+(Service|Ingress|PodDisruptionBudget|HorizontalPodAutoscaler)/([a-z0-9][-a-z0-9.]*)"
)
_OWNER = rx.compile(r"(?m)^Controlled By:\s+(ReplicaSet|Deployment|StatefulSet|DaemonSet|Job|CronJob)/(\S+)")
_TEMPLATE_HASH = rx.compile(r"\bpod-template-hash=([a-z0-9]+)")
_NOT_READY = rx.compile(r"(?m)^\s+Ready\s+False\b")
# Priority of a lead to each related kind: the Service first (its endpoints), then what routes to it.
PRIORITY = {"Service": 66, "Ingress": 64, "HorizontalPodAutoscaler": 56, "PodDisruptionBudget": 52}
OWNER_PRIORITY = 40


@register
class LineageRefsAnalyzer(Analyzer):
    name = "k8s_lineage_refs"

    def applies(self, out: ToolOutput) -> bool:
        return _ROOT.search(out.text) is not None or (
            "Controlled By:" in out.text and looks_like_describe(out.text)
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        namespace = str(out.params.get("namespace") or "")
        if looks_like_describe(out.text):
            owner = _OWNER.search(out.text)
            ns = field_value(out.text, "Namespace") or namespace
            is_pod = "Containers:" in out.text
            if owner and ns and (_NOT_READY.search(out.text) if is_pod else owner.group(1) == "Deployment"):
                kind, name = owner.group(1).lower(), owner.group(2)
                hashed = _TEMPLATE_HASH.search(out.text) if kind == "replicaset" else None
                if hashed and name.endswith(f"-{hashed.group(1)}"):
                    # The Deployment controller names its ReplicaSets <deployment>-<pod-template-hash>.
                    kind, name = "deployment", name[: -len(hashed.group(1)) - 1]
                state.lead(ObjRef(kind, name, ns), "the owner of an unhealthy pod", OWNER_PRIORITY)
            return []
        if not namespace:
            return []
        for kind, name in dict.fromkeys(_RELATED.findall(out.text)):
            state.lead(
                ObjRef(kind.lower(), name, namespace),
                f"a {kind} in the lineage of the subject",
                PRIORITY[kind],
            )
        return []
