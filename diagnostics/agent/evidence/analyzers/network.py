"""The network path to a service -> what blocks it: a Service with no endpoints (its selector matches
no pod, and which label differs), a NetworkPolicy that isolates the pods, a host name that resolves
to no Service.

Facts it keeps on the state: ``service_selectors`` (namespace/name -> selector), ``pod_labels``
(namespace/pod -> labels), ``services`` (namespace -> Service names), ``unresolved_hosts`` (host ->
namespace of the pod that failed to resolve it).
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
    register,
    register_correlator,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity

_NONE = "<none>"


def parse_selector(text: str) -> dict[str, str]:
    """``app=a,tier=b`` -> {"app": "a", "tier": "b"}; ``<none>`` and set-based terms give {}."""
    pairs: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if sep and key and "!" not in key and " " not in key:
            pairs[key] = value.lstrip("=")
    return pairs


def _selector_text(selector: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in selector.items())


def _is_service_describe(text: str) -> bool:
    return (
        looks_like_describe(text)
        and bool(rx.search(r"^\s*Endpoints:", text, rx.MULTILINE))
        and bool(rx.search(r"^\s*(?:IP|Type):", text, rx.MULTILINE))
    )


def _is_policy_describe(text: str) -> bool:
    return looks_like_describe(text) and "PodSelector:" in text and "Policy Types" in text


@register
class ServiceAnalyzer(Analyzer):
    """kubectl describe of a Service: its selector and endpoints."""

    name = "network_service"

    def applies(self, out: ToolOutput) -> bool:
        return _is_service_describe(out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        name, namespace = field_value(out.text, "Name"), field_value(out.text, "Namespace")
        selector = parse_selector(field_value(out.text, "Selector"))
        endpoints = field_value(out.text, "Endpoints")
        label = f"{namespace}/{name}"
        state.fact_dict("service_selectors")[label] = selector
        state.fact_set("namespaces").add(namespace)
        if namespace:
            state.lead(ObjRef("pod", "*", namespace), f"the pods service {name} should select", 75)
            state.lead(ObjRef("networkpolicy", "*", namespace), f"policies on the way to service {name}", 70)
        if endpoints and endpoints != _NONE:
            state.fact_set("services_with_endpoints").add(label)
            return [
                Finding(
                    "service_endpoints",
                    f"Service {name} has ready endpoints ({clip(endpoints, 80)}).",
                    Severity.INFO,
                    f"service/{label}",
                    f"Endpoints: {clip(endpoints, 120)}",
                    5,
                )
            ]
        if not selector:
            return []
        return [
            Finding(
                "service_no_endpoints",
                f"Service {name} has no endpoints: its selector {_selector_text(selector)} matches no "
                "ready pod, so nothing receives its traffic.",
                Severity.CRITICAL,
                f"service/{label}",
                "Endpoints: <none>",
                70,
                "Make the Service selector match the pods' labels (or fix the pods so they become ready).",
            )
        ]


@register
class PodLabelsAnalyzer(Analyzer):
    """Pod listings with a LABELS column: which labels each pod has (for Service selectors)."""

    name = "network_pod_labels"

    def applies(self, out: ToolOutput) -> bool:
        return "LABELS" in out.text and "NAME" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        table = parse_table(out.text)
        if table is None or "LABELS" not in table.header:
            return []
        namespace = str(out.params.get("namespace") or "")
        labels = state.fact_dict("pod_labels")
        for row in table.rows:
            if len(row) >= 2 and "=" in row[-1]:
                ns = table.column(row, "NAMESPACE") or namespace
                labels[f"{ns}/{row[0]}"] = parse_selector(row[-1])
        return []


@register
class ServiceListAnalyzer(Analyzer):
    """Service listings (NAME TYPE CLUSTER-IP ...): which Services exist in a namespace."""

    name = "network_service_list"

    def applies(self, out: ToolOutput) -> bool:
        return "CLUSTER-IP" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        table = parse_table(out.text)
        if table is None:
            return []
        namespace = str(out.params.get("namespace") or "")
        services = state.fact_dict("services")
        for row in table.rows:
            if row:
                ns = table.column(row, "NAMESPACE") or namespace
                services.setdefault(ns, set()).add(row[0] if "NAMESPACE" not in table.header else row[1])
        return []


@register
class NetworkPolicyAnalyzer(Analyzer):
    """NetworkPolicy listings (leads to each policy) and describes (what traffic each one blocks)."""

    name = "network_policy"

    def applies(self, out: ToolOutput) -> bool:
        return "POD-SELECTOR" in out.text or _is_policy_describe(out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        if not _is_policy_describe(out.text):
            table = parse_table(out.text)
            namespace = str(out.params.get("namespace") or "")
            for row in table.rows if table else []:
                ns = table.column(row, "NAMESPACE") if table else ""
                if row:
                    name = row[1] if ns else row[0]
                    state.lead(ObjRef("networkpolicy", name, ns or namespace), "a NetworkPolicy", 80)
            return []
        tree = describe_tree(out.text)
        name, namespace = tree.get("Name"), tree.get("Namespace")
        spec = tree.child("Spec") or tree
        selector_text = spec.get("PodSelector")
        selects_all = selector_text.startswith(_NONE)
        selector = {} if selects_all else parse_selector(selector_text.split(" (")[0])
        findings: list[Finding] = []
        for direction in ("ingress", "egress"):
            if f"isolated for {direction} connectivity" not in out.text:
                continue
            targets = self._targets(state, namespace, selector, selects_all)
            pods = (
                f"all pods in namespace {namespace}"
                if selects_all
                else f"the pods with {_selector_text(selector)}"
            )
            blocked = f", so traffic to {targets} is blocked" if targets and direction == "ingress" else ""
            if direction == "egress":
                blocked = ", so they cannot reach anything, DNS (port 53) included"
            findings.append(
                Finding(
                    f"network_policy_denies_{direction}",
                    f"NetworkPolicy {name} isolates {pods} for {direction}: it allows no {direction} "
                    f"traffic{blocked} (no policy allows it).",
                    Severity.CRITICAL,
                    f"networkpolicy/{namespace}/{name}",
                    clip(f"PodSelector: {selector_text}; {direction}: isolated"),
                    86,
                    f"Allow the needed {direction} traffic (a policy that selects these pods and admits "
                    f"it) or remove NetworkPolicy {name} if it was applied by mistake.",
                )
            )
        return findings

    @staticmethod
    def _targets(state: AnalysisState, namespace: str, selector: dict[str, str], selects_all: bool) -> str:
        names = [
            label.split("/", 1)[1]
            for label, wanted in state.fact_dict("service_selectors").items()
            if label.startswith(f"{namespace}/")
            and (selects_all or all(wanted.get(k) == v for k, v in selector.items()))
        ]
        return ", ".join(f"service {n}" for n in names)


@register_correlator
def selector_mismatch(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """A Service with no endpoints and pods that share part of its selector: the label that differs."""
    reported = state.fact_set("selector_mismatch_reported")
    pod_labels = state.fact_dict("pod_labels")
    out: list[Finding] = []
    for label, selector in state.fact_dict("service_selectors").items():
        if not selector or label in reported or label in state.fact_set("services_with_endpoints"):
            continue
        namespace, name = label.split("/", 1)
        near: list[tuple[str, dict[str, str]]] = []
        for pod, labels in pod_labels.items():
            if not pod.startswith(f"{namespace}/"):
                continue
            matching = sum(1 for k, v in selector.items() if labels.get(k) == v)
            if 0 < matching < len(selector):
                near.append((pod.split("/", 1)[1], labels))
        if not near:
            continue
        reported.add(label)
        pods = [pod for pod, _ in near]
        differing = {
            k: sorted({labels.get(k, "(no label)") for _, labels in near})
            for k, v in selector.items()
            if any(labels.get(k) != v for _, labels in near)
        }
        wanted = ", ".join(f"{k}={selector[k]}" for k in differing)
        have = ", ".join(f"{k}={'/'.join(values)}" for k, values in differing.items())
        out.append(
            Finding(
                "service_selector_mismatch",
                f"Service {name} has no endpoints because its selector does not match the pods: it selects "
                f"{wanted}, but the pods ({', '.join(pods[:3])}) are labelled {have}.",
                Severity.CRITICAL,
                f"service/{label}",
                f"selector {_selector_text(selector)}",
                92,
                f"Change the Service selector to {have} (or relabel the pods to {wanted}).",
            )
        )
    return out


@register_correlator
def unresolved_service_names(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """A host name that failed to resolve, in a namespace whose Services are known: no such Service."""
    reported = state.fact_set("unresolved_reported")
    services = state.fact_dict("services")
    out: list[Finding] = []
    for host, namespace in state.fact_dict("unresolved_hosts").items():
        parts = host.split(".")
        name = parts[0]
        ns = parts[1] if len(parts) > 1 and parts[1] not in ("svc", "cluster") else namespace
        if host in reported or ns not in services or (len(parts) > 2 and "svc" not in parts):
            continue
        known = sorted(services[ns])
        if name in known:
            continue
        reported.add(host)
        out.append(
            Finding(
                "service_name_unknown",
                f"The host name {host} cannot be resolved because there is no Service named {name} in "
                f"namespace {ns}; the Services there are {', '.join(known) or 'none'}.",
                Severity.CRITICAL,
                f"service/{ns}/{name}",
                f"services in {ns}: {', '.join(known)}",
                93,
                f"Point the client at an existing Service (one of {', '.join(known[:4])}) or create "
                f"Service {name}.",
            )
        )
    return out
