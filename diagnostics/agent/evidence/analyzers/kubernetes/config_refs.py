"""A ConfigMap changed after the pods that read it into their environment started.

Environment variables from a ConfigMap (``envFrom.configMapRef``, ``env[].valueFrom.configMapKeyRef``) are
resolved once, when the kubelet starts the container; a later change of the ConfigMap reaches a running
container only through a mounted volume (not a ``subPath``), never through its environment. So a pod whose
containers started before the ConfigMap's last change still runs with the old values until it is
restarted (``kubectl rollout restart``). When is read from the objects themselves: the container's
``state.running.startedAt`` (else the pod's ``status.startTime``) and the latest ``metadata.managedFields``
time of the ConfigMap (the API server's record of each write).

A pod manifest's environment references lead to their ConfigMaps; the correlator compares the times.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    register,
    register_correlator,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.freshness import parse_iso
from diagnostics.agent.findings import Finding, ObjRef, Severity


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _part(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def env_configmaps(spec: dict[str, Any]) -> list[str]:
    """The ConfigMaps a pod spec's containers read into their environment (not those mounted)."""
    names: list[str] = []
    for container in _dicts(spec.get("containers")) + _dicts(spec.get("initContainers")):
        for source in _dicts(container.get("envFrom")):
            names.append(str(_part(source, "configMapRef").get("name") or ""))
        for var in _dicts(container.get("env")):
            names.append(str(_part(_part(var, "valueFrom"), "configMapKeyRef").get("name") or ""))
    return list(dict.fromkeys(n for n in names if n))


def started_at(status: dict[str, Any]) -> str:
    """The earliest start of a running container of the pod, else the pod's startTime."""
    starts = [
        str(_part(_part(c, "state"), "running").get("startedAt") or "")
        for c in _dicts(status.get("containerStatuses"))
    ]
    starts = sorted(s for s in starts if parse_iso(s))
    return starts[0] if starts else str(status.get("startTime") or "")


def changed_at(meta: dict[str, Any]) -> str:
    """The latest write the API server recorded for an object (managedFields), else its creation."""
    times = sorted(
        str(f.get("time") or "") for f in _dicts(meta.get("managedFields")) if parse_iso(str(f.get("time")))
    )
    return times[-1] if times else str(meta.get("creationTimestamp") or "")


@register
class ConfigReferenceAnalyzer(Analyzer):
    name = "k8s_config_references"

    def applies(self, out: ToolOutput) -> bool:
        head = out.text[:2000]
        return "ConfigMap" in head or ("Pod" in head and "configMap" in out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        obj = manifest_of(out.text)
        if obj is None:
            return []
        meta, namespace = _part(obj, "metadata"), str(_part(obj, "metadata").get("namespace") or "")
        name = str(meta.get("name") or "")
        if obj.get("kind") == "Pod":
            refs = env_configmaps(_part(obj, "spec"))
            if refs and namespace:
                state.fact_dict("env_configmaps")[f"{namespace}/{name}"] = (
                    refs,
                    started_at(_part(obj, "status")),
                )
                for ref in refs:
                    state.lead(ObjRef("configmap", ref, namespace), f"the environment of pod {name}", 95)
        elif obj.get("kind") == "ConfigMap" and namespace:
            data = {str(k): str(v) for k, v in _part(obj, "data").items()}
            state.fact_dict("configmap_writes")[f"{namespace}/{name}"] = (changed_at(meta), data)
        return []


def _pod_logs(state: AnalysisState, pod: str) -> str:
    return "\n".join(o.text for o in state.outputs if o.is_log and o.params.get("pod_name") == pod)


@register_correlator
def environment_older_than_configmap(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    writes = state.fact_dict("configmap_writes")
    reported = state.fact_set("stale_environment_reported")
    out: list[Finding] = []
    for pod_key, (refs, started) in state.fact_dict("env_configmaps").items():
        namespace, pod = pod_key.split("/", 1)
        for ref in refs:
            written = writes.get(f"{namespace}/{ref}")
            start, change = parse_iso(started), parse_iso(written[0]) if written else None
            if written is None or start is None or change is None or change <= start:
                continue
            if f"{pod_key} {ref}" in reported:
                continue
            reported.add(f"{pod_key} {ref}")
            data = written[1]
            values = "; ".join(f"{k}={v}" for k, v in list(data.items())[:4])
            logs = _pod_logs(state, pod)
            # The pod's logs never show a current value: what it uses is an older one.
            unseen = bool(logs) and not any(len(v) >= 8 and v in logs for v in data.values())
            shown = " (its logs show none of the new ones)" if unseen else ""
            out.append(
                Finding(
                    "environment_older_than_configmap",
                    f"The pod {pod} started on {started}, before ConfigMap {ref} was changed (at "
                    f"{written[0]}; now {values}). Environment from a ConfigMap is read only at container "
                    f"start, so the pod still runs with the old values{shown} and its Deployment needs a "
                    "restart to read the change.",
                    Severity.CRITICAL if unseen else Severity.WARNING,
                    f"pod/{pod_key}",
                    f"container started {started}; ConfigMap {ref} last written {written[0]}",
                    92 if unseen else 60,
                    f"Restart the pods that read {ref} (kubectl rollout restart of their Deployment), or "
                    "mount the ConfigMap as a volume to pick up changes.",
                )
            )
    return out
