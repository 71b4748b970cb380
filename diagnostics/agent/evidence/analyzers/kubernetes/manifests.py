"""Objects read as manifests (``kubectl get -o yaml`` / ``-o json``) -> findings, by the API's own fields.

- ``status.conditions`` of any object that has no analyzer of its own (a custom resource's included), by
  the same polarity rules as a describe's (``conditions.py``); a GitOps object whose
  ``status.lastAttemptedRevision`` differs from ``lastAppliedRevision`` has not applied that revision.
- A Service's named ``targetPort`` resolves, per pod, to the container port of that name; a pod that
  declares no port of that name is no endpoint of the Service, however Ready it is. The Service's ports
  and selector and each pod's labels and port names are kept, and a correlator compares them.
"""

from __future__ import annotations

from typing import Any

import yaml

from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    register,
    register_correlator,
)
from diagnostics.agent.evidence.analyzers.kubernetes.conditions import (
    _OWN_ANALYZERS,
    Condition,
    _detail,
    problems,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity
from routing.json_body import loads_answer

_MAX = 400_000


def manifest_of(text: str) -> dict[str, Any] | None:
    """The object a ``-o json`` / ``-o yaml`` output holds (one object with ``kind``), else None."""
    stripped = text.strip()
    if not stripped or len(stripped) > _MAX or ("apiVersion" not in stripped[:2000]):
        return None
    try:
        data = loads_answer(stripped) if stripped[:1] == "{" else yaml.safe_load(stripped)
    except (ValueError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("kind"), str) else None


def _part(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _conditions(status: dict[str, Any]) -> list[Condition]:
    found = []
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") and str(c.get("status")) in ("True", "False", "Unknown"):
            found.append(
                Condition(
                    str(c["type"]), str(c["status"]), str(c.get("reason") or ""), str(c.get("message") or "")
                )
            )
    return found


@register
class ManifestAnalyzer(Analyzer):
    name = "k8s_manifest"

    def applies(self, out: ToolOutput) -> bool:
        return "apiVersion" in out.text[:2000] and "kind" in out.text[:2000]

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        obj = manifest_of(out.text)
        if obj is None:
            return []
        meta, spec, status = _part(obj, "metadata"), _part(obj, "spec"), _part(obj, "status")
        ref = ObjRef(obj["kind"], str(meta.get("name") or ""), str(meta.get("namespace") or ""))
        if ref.kind == "service":
            _keep_service(ref, spec, state)
        elif ref.kind == "pod":
            _keep_pod(ref, meta, spec, state)
        if ref.kind in _OWN_ANALYZERS:
            return []
        return _failing(ref, obj["kind"], status)


def _failing(ref: ObjRef, kind: str, status: dict[str, Any]) -> list[Finding]:
    findings = []
    attempted, applied = status.get("lastAttemptedRevision"), status.get("lastAppliedRevision")
    unapplied = (
        f" Revision {attempted} is not applied (the last applied is {applied})."
        if attempted and applied and attempted != applied
        else ""
    )
    for condition in problems(_conditions(status), str(status.get("phase") or "")):
        why = condition.message or condition.reason
        summary = _detail(ref.kind, ref, condition, "") or (
            f"{kind} {ref.name}: condition {condition.type} is {condition.status}"
            f"{f' ({condition.reason})' if condition.reason else ''}: {clip(why, 360)}."
        )
        rank = 70 if condition.type == "Ready" else 78
        findings.append(
            Finding(
                "condition_failing", summary + unapplied, Severity.CRITICAL, ref.label, clip(why), rank + 4
            )
        )
        unapplied = ""
    return findings


def _keep_service(ref: ObjRef, spec: dict[str, Any], state: AnalysisState) -> None:
    named = [
        (str(p.get("port")), str(p["targetPort"]))
        for p in spec.get("ports") or []
        if isinstance(p, dict) and isinstance(p.get("targetPort"), str) and not p["targetPort"].isdigit()
    ]
    selector = spec.get("selector")
    if named and isinstance(selector, dict) and selector:
        state.fact_dict("service_named_ports")[ref.label] = (
            named,
            {str(k): str(v) for k, v in selector.items()},
        )


def _keep_pod(ref: ObjRef, meta: dict[str, Any], spec: dict[str, Any], state: AnalysisState) -> None:
    ports = [
        f"{p.get('name')} ({p.get('containerPort')})"
        for c in spec.get("containers") or []
        if isinstance(c, dict)
        for p in c.get("ports") or []
        if isinstance(p, dict) and p.get("name")
    ]
    labels = _part(meta, "labels")
    state.fact_dict("pod_port_names")[ref.label] = (ports, {str(k): str(v) for k, v in labels.items()})


@register_correlator
def named_target_port_missing(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """A Service whose named targetPort no container port of its selected pods has: no endpoints."""
    reported = state.fact_set("named_port_reported")
    out: list[Finding] = []
    pods = state.fact_dict("pod_port_names")
    for label, (named, selector) in state.fact_dict("service_named_ports").items():
        namespace = label.split("/")[1] if label.count("/") == 2 else ""
        for pod_label, (ports, labels) in pods.items():
            if not pod_label.startswith(f"pod/{namespace}/") or any(
                labels.get(k) != v for k, v in selector.items()
            ):
                continue
            names = {p.split(" ", 1)[0] for p in ports}
            for port, target in named:
                key = f"{label} {target}"
                if target in names or key in reported:
                    continue
                reported.add(key)
                service = label.rsplit("/", 1)[-1]
                out.append(
                    Finding(
                        "named_target_port_missing",
                        f"Service {service} targets port {target} by name (its port {port}), but the "
                        f"containers of its pods (pod {pod_label.rsplit('/', 1)[-1]}) name their ports "
                        f"{', '.join(ports) or 'nothing'}: no container port is named {target}, so the "
                        "Service has no endpoints and its traffic goes nowhere.",
                        Severity.CRITICAL,
                        label,
                        f"targetPort: {target}; container ports: {', '.join(ports) or 'none'}",
                        86,
                        f"Name the container port {target} or point the Service's targetPort at "
                        f"{', '.join(p.split(' ', 1)[0] for p in ports) or 'the port number'}.",
                    )
                )
    return out
