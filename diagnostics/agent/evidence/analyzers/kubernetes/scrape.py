"""A pod's scrape annotation that names a port nothing listens on.

Prometheus' usual ``kubernetes-pods`` job (and most Helm charts' copies of it) keeps pods annotated
``prometheus.io/scrape: "true"`` and rewrites the target's address to ``<pod IP>:<prometheus.io/port>``.
The annotation is not checked against the pod: when it names a port no container declares (and the
application says it listens elsewhere), every scrape is refused and ``up`` is 0 for a pod that is itself
Ready and serving. The fix is the annotation (or the port the exporter binds), not the pod.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    register,
    register_correlator,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.findings import Finding, Severity

_PORT_ANNOTATION = "prometheus.io/port"
_LISTENING = rx.compile(
    r"\b(metrics|prometheus|exporter)\w*\b[^\n]*?\blisten\w*\s+on\s+\S*?:(\d{2,5})\b", rx.I
)


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _part(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def declared_ports(spec: dict[str, Any]) -> dict[str, str]:
    """containerPort -> its name (or "") over the pod's containers."""
    return {
        str(p.get("containerPort")): str(p.get("name") or "")
        for c in _dicts(spec.get("containers"))
        for p in _dicts(c.get("ports"))
        if p.get("containerPort")
    }


@register
class ScrapeAnnotationAnalyzer(Analyzer):
    name = "k8s_scrape_annotation"

    def applies(self, out: ToolOutput) -> bool:
        return _PORT_ANNOTATION in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        obj = manifest_of(out.text)
        if obj is None or obj.get("kind") != "Pod":
            return []
        meta, spec, status = _part(obj, "metadata"), _part(obj, "spec"), _part(obj, "status")
        port = str(_part(meta, "annotations").get(_PORT_ANNOTATION) or "")
        ports = declared_ports(spec)
        if not port.isdigit() or not ports or port in ports:
            return []
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in _dicts(status.get("conditions"))
        )
        state.fact_dict("scrape_port_mismatch")[f"pod/{namespace}/{name}"] = (
            port,
            ports,
            str(status.get("podIP") or ""),
            ready,
        )
        return []


def _metrics_port(state: AnalysisState, pod: str, ports: dict[str, str]) -> str:
    for out in state.outputs:
        if out.is_log and out.params.get("pod_name") == pod and (said := _LISTENING.search(out.text)):
            return said.group(2)
    named = [p for p, n in ports.items() if "metric" in n.lower()]
    return named[0] if named else ""


@register_correlator
def scrape_port_nothing_listens(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    reported = state.fact_set("scrape_port_reported")
    texts = " ".join([f.summary + " " + f.evidence for f in findings] + [o.text for o in state.outputs])
    out: list[Finding] = []
    for label, (port, ports, ip, ready) in state.fact_dict("scrape_port_mismatch").items():
        pod = label.rsplit("/", 1)[-1]
        metrics = _metrics_port(state, pod, ports)
        down = bool(ip) and f"{ip}:{port}" in texts  # a scrape of that address was read (up, targets)
        if label in reported or not (metrics or down):
            continue
        reported.add(label)
        declared = ", ".join(f"{n or 'unnamed'} {p}" for p, n in ports.items())
        healthy = " The pods themselves are healthy (Ready): only the scrape fails." if ready else ""
        out.append(
            Finding(
                "scrape_port_mismatch",
                f"Prometheus scrapes pod {pod} on port {port}, from the pod annotation {_PORT_ANNOTATION}, "
                f"where nothing listens (its containers declare {declared}), so up is 0 for it"
                + (f": the metrics port is {metrics}." if metrics else ".")
                + healthy,
                Severity.CRITICAL,
                label,
                f"{_PORT_ANNOTATION}: {port}; container ports: {declared}",
                90 if down or metrics else 60,
                f"Set the annotation {_PORT_ANNOTATION} to {metrics or 'the port the metrics are served on'} "
                "in the pod template.",
            )
        )
    return out
