"""A scrape job with no target: the Prometheus operator never selected its ServiceMonitor.

With the Prometheus operator, a ``Prometheus`` resource picks the ServiceMonitors (and PodMonitors,
PrometheusRules) it turns into scrape configuration by label: ``spec.serviceMonitorSelector`` (a label
selector; empty selects all, absent selects none) and ``spec.serviceMonitorNamespaceSelector`` (absent:
only its own namespace). A ServiceMonitor that does not carry the selector's labels is valid, accepted by
the API server and ignored: no target, no error anywhere, and an ``absent(up{job=...})`` alert or an empty
query is the only sign. The application may be perfectly healthy and serve ``/metrics``.

Read from the alert (its job, namespace and ``prometheus`` label), the query that came back empty, the
namespace's ServiceMonitors and PodMonitors (``-o yaml``), and the Prometheus resource's selectors.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

_ABSENT = rx.compile(r"(?i)absent\(\s*up\{[^}]*job=\"([\w.\-]+)\"|\bTargetAbsent\b|\bTargetMissing\b")
_EMPTY = rx.compile(r"\"result\"\s*:\s*\[\s*\]")
_MONITORS = {"ServiceMonitor": "serviceMonitor", "PodMonitor": "podMonitor"}


def _part(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


@register
class MonitorSelectionAnalyzer(Analyzer):
    name = "monitor_selection"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("monitor_selection")
        if out.tool == "alert":
            self._alert(out, state, facts)
            return []
        if not facts.get("job"):
            return []
        if _EMPTY.search(out.text) and "query" in out.params:
            facts["empty"] = str(out.params.get("query"))
        manifest = manifest_of(out.text)
        if manifest is not None:
            self._manifest(manifest, facts, state)
        table = parse_table(out.text)
        if table is not None and "STATUS" in table.header:
            job = str(facts["job"])
            facts.setdefault("pods", []).extend(
                f"{r[0]} {table.column(r, 'STATUS')}" for r in table.rows if r and r[0].startswith(job)
            )
        if facts.get("reported") or not facts.get("prometheus_spec") or not facts.get("monitors"):
            return []
        if not facts.get("pods") and facts.get("waits", 0) < 6:
            facts["waits"] = facts.get("waits", 0) + 1  # whether the job's pods run, read next
            return []
        finding = _finding(facts)
        if finding is not None:
            facts["reported"] = True
            return [finding]
        return []

    @staticmethod
    def _alert(out: ToolOutput, state: AnalysisState, facts: dict[str, Any]) -> None:
        labels = state.alert.labels
        match = _ABSENT.search(out.text)
        if match is None:
            return
        job = match.group(1) or labels.get("job", "")
        namespace = labels.get("namespace", "")
        if not job:
            return
        facts.update(job=job, namespace=namespace)
        if namespace:
            for kind in ("servicemonitor", "podmonitor"):
                state.lead(ObjRef(kind, "*", namespace), f"what would make job {job}'s targets", 86)
            state.lead(ObjRef("servicemonitor", job, namespace), f"the monitor of job {job}", 86)
        prometheus = labels.get("prometheus", "")
        if "/" in prometheus:
            pns, pname = prometheus.split("/", 1)
            facts["prometheus"] = (pns, pname)
            state.lead(ObjRef("prometheus", pname, pns), "which monitors it selects", 86)
        else:
            state.lead(ObjRef("prometheus", "*", "monitoring"), "which monitors it selects", 70)

    @staticmethod
    def _manifest(obj: dict[str, Any], facts: dict[str, Any], state: AnalysisState) -> None:
        kind, meta = str(obj.get("kind")), _part(obj, "metadata")
        if kind in _MONITORS:
            facts.setdefault("monitors", {})[str(meta.get("name"))] = {
                "kind": kind,
                "namespace": str(meta.get("namespace") or facts.get("namespace") or ""),
                "labels": {str(k): str(v) for k, v in _part(meta, "labels").items()},
            }
        elif kind == "Prometheus":
            namespace = str(meta.get("namespace") or "")
            facts["prometheus_spec"] = (str(meta.get("name")), namespace, _part(obj, "spec"))


def _missing(selector: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """The selector's requirements ``labels`` does not meet, as 'key=value' / 'key in (...)'."""
    missing = [f"{k}={v}" for k, v in _part(selector, "matchLabels").items() if labels.get(str(k)) != str(v)]
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            continue
        key, op = str(expr.get("key")), str(expr.get("operator"))
        values = [str(v) for v in expr.get("values") or []]
        if (op == "In" and labels.get(key) not in values) or (op == "Exists" and key not in labels):
            missing.append(f"{key} in ({', '.join(values)})" if values else key)
    return missing


def _finding(facts: dict[str, Any]) -> Finding | None:
    pname, pns, spec = facts["prometheus_spec"]
    job = str(facts["job"])
    monitors: dict[str, dict[str, Any]] = facts["monitors"]
    mine = monitors.get(job) or next((m for n, m in monitors.items() if job in n), None)
    if mine is None:
        return None
    name = job if job in monitors else next(n for n in monitors if job in n)
    field = _MONITORS[mine["kind"]]
    selector = spec.get(f"{field}Selector")
    ns_selector = spec.get(f"{field}NamespaceSelector")
    why = ""
    if not isinstance(selector, dict):
        why = f"the Prometheus resource {pname} has no {field}Selector, so it selects no {mine['kind']}"
    elif missing := _missing(selector, mine["labels"]):
        why = (
            f"the {mine['kind']} {name} in {mine['namespace']} does not carry the label "
            f"{', '.join(missing)} that the Prometheus resource {pname} ({pns})'s {field}Selector requires"
        )
    elif ns_selector is None and pns and mine["namespace"] != pns:
        why = (
            f"the Prometheus resource {pname} has no {field}NamespaceSelector, so it reads monitors of its "
            f"own namespace {pns} only, not {mine['namespace']}"
        )
    if not why:
        return None
    selected = [
        n
        for n, m in monitors.items()
        if n != name and m["kind"] == mine["kind"] and isinstance(selector, dict)
        if not _missing(selector, m["labels"])
    ]
    others = f" ({', '.join(selected[:3])}, which match, are scraped)" if selected else ""
    empty = f" (the query {facts['empty']} returned no series)" if facts.get("empty") else ""
    running = [p.split()[0] for p in facts.get("pods") or [] if p.endswith("Running")]
    pods = (
        f" The {job} pods themselves are running ({', '.join(running[:3])}): nothing scrapes their metrics."
        if running
        else ""
    )
    summary = (
        f"Prometheus scrapes no target of job {job}: the up series is absent{empty}: {why}, so the operator "
        f"leaves it out of the scrape configuration{others}.{pods}"
    )
    return Finding(
        "monitor_not_selected",
        summary,
        Severity.CRITICAL,
        f"{mine['kind'].lower()}/{mine['namespace']}/{name}",
        why[:200],
        90,
        f"Give the {mine['kind']} {name} the labels the Prometheus resource {pname} selects on (or widen "
        "its selector).",
    )
