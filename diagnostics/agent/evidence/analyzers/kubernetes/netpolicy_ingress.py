"""A NetworkPolicy on a destination's pods whose ingress rules do not admit the client that fails to reach it.

The API's semantics: a policy selects the pods of its namespace that match ``spec.podSelector`` (empty:
all of them); it isolates their ingress when ``policyTypes`` holds ``Ingress`` (implied when
``policyTypes`` is absent). An isolated pod accepts only what some selecting policy's ingress rules
allow, the union of them. A rule admits a connection when its ``ports`` (absent: every port) hold the
destination port and one of its ``from`` peers (absent: every source) matches the client: a
``podSelector`` alone matches pods of the policy's own namespace, a ``namespaceSelector`` pods of the
namespaces it selects (with a ``podSelector`` too, both must match), an ``ipBlock`` the client's IP.

Reads: a client pod's ``connection_failure`` (timeouts, refusals) naming ``host:port``; the host taken as
a Service (``name``, ``name.namespace``, ``name.namespace.svc...``); that Service's describe (selector,
target port), the client pod's labels and IP (describe), the destination namespace's policies. A
policy is named only when every rule is known not to admit the client: a selector it cannot evaluate
(set-based terms, a namespace's labels other than ``kubernetes.io/metadata.name``, an IP not read) is
no verdict.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    field_value,
    looks_like_describe,
    register,
    register_correlator,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

_TARGET = rx.compile(r"\bat\s+([a-z0-9][-a-z0-9.]*):(\d{1,5})\b")
_NS_NAME = "kubernetes.io/metadata.name"
# A label selector: None when it cannot be evaluated here (set-based terms), {} when it selects all.
Selector = dict[str, str] | None


def parse_label_selector(text: str) -> Selector:
    """``app=a,tier=b`` -> dict; ``<none>`` or empty -> {} (selects all); a set-based term -> None."""
    text = text.split(" (")[0].strip()
    if not text or text.startswith("<none>"):
        return {}
    pairs: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key or key.endswith("!") or " " in key.strip():
            return None
        pairs[key.strip()] = value.lstrip("=").strip()
    return pairs


def selector_of_manifest(obj: Any) -> Selector:
    if not isinstance(obj, dict):
        return {}
    if obj.get("matchExpressions"):
        return None
    return {str(k): str(v) for k, v in (obj.get("matchLabels") or {}).items()}


def _port_of(value: Any) -> int:
    text = str(value).split("/", 1)[0].strip()
    return int(text) if text.isdigit() else -1  # -1: a named port


def ingress_of_describe(text: str) -> list[dict[str, Any]] | None:
    """The rules under a describe's ``Allowing ingress traffic:``; None when it does not affect ingress."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == "Allowing ingress traffic:"), None)
    if start is None:
        return None
    indent = len(lines[start]) - len(lines[start].lstrip())
    rules: list[dict[str, Any]] = []
    rule: dict[str, Any] = {"ports": [], "peers": []}
    peer: dict[str, Any] | None = None
    for line in lines[start + 1 :]:
        text_ = line.strip()
        if text_ and len(line) - len(line.lstrip()) <= indent:
            break
        if "isolated for ingress" in text_:
            return []
        if text_.startswith("----"):
            rules.append(rule)
            rule, peer = {"ports": [], "peers": []}, None
        elif text_.startswith("To Port:"):
            value = text_.split(":", 1)[1].strip()
            if value.startswith("<any>"):
                rule["ports"] = None
            elif rule["ports"] is not None:
                rule["ports"].append(_port_of(value))
        elif text_.startswith("From:"):
            if "<any>" in text_:
                rule["peers"] = None
            elif rule["peers"] is not None:
                peer = {}
                rule["peers"].append(peer)
        elif peer is not None and text_.startswith("PodSelector:"):
            peer["pods"] = parse_label_selector(text_.split(":", 1)[1])
        elif peer is not None and text_.startswith("NamespaceSelector:"):
            peer["namespaces"] = parse_label_selector(text_.split(":", 1)[1])
        elif peer is not None and text_.startswith("CIDR:"):
            peer["cidr"] = text_.split(":", 1)[1].strip()
        elif peer is not None and text_.startswith("Except:"):
            peer["except"] = [c.strip() for c in text_.split(":", 1)[1].split(",") if c.strip()]
    rules.append(rule)
    return rules


def ingress_of_manifest(spec: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A policy spec's ingress rules; None when its policyTypes leave ingress alone."""
    types = {str(t) for t in spec.get("policyTypes") or []} or {"Ingress"}
    if "Ingress" not in types:
        return None
    rules = []
    for item in spec.get("ingress") or []:
        if not isinstance(item, dict):
            continue
        ports = item.get("ports")
        peers: list[dict[str, Any]] | None = None
        if item.get("from"):
            peers = []
            for source in item["from"]:
                if not isinstance(source, dict):
                    continue
                peer: dict[str, Any] = {}
                if "podSelector" in source:
                    peer["pods"] = selector_of_manifest(source["podSelector"])
                if "namespaceSelector" in source:
                    peer["namespaces"] = selector_of_manifest(source["namespaceSelector"])
                block = source.get("ipBlock")
                if isinstance(block, dict):
                    peer["cidr"] = str(block.get("cidr") or "")
                    peer["except"] = [str(c) for c in block.get("except") or []]
                peers.append(peer)
        rules.append(
            {
                "ports": None
                if not ports
                else [_port_of(p.get("port")) for p in ports if isinstance(p, dict)],
                "peers": peers,
            }
        )
    return rules


def _matches(selector: Selector, labels: dict[str, str] | None) -> bool | None:
    if selector is None:
        return None
    if not selector:
        return True
    if labels is None:
        return None
    return all(labels.get(k) == v for k, v in selector.items())


def _in_block(peer: dict[str, Any], ip: str) -> bool | None:
    if not ip:
        return None
    try:
        address = ipaddress.ip_address(ip)
        if address not in ipaddress.ip_network(peer["cidr"], strict=False):
            return False
        return not any(address in ipaddress.ip_network(c, strict=False) for c in peer.get("except") or [])
    except ValueError:
        return None


def peer_admits(peer: dict[str, Any], policy_ns: str, client: dict[str, Any]) -> bool | None:
    """Whether one ``from`` peer admits the client: True, False, or None (cannot tell)."""
    if "cidr" in peer:
        return _in_block(peer, client["ip"])
    if "namespaces" in peer:
        selector = peer["namespaces"]
        if selector and set(selector) == {_NS_NAME}:
            in_ns: bool | None = selector[_NS_NAME] == client["namespace"]
        else:
            in_ns = _matches(selector, None)
    else:
        in_ns = client["namespace"] == policy_ns
    if in_ns is False:
        return False
    pods = _matches(peer["pods"], client["labels"]) if "pods" in peer else True
    if pods is False:
        return False
    return None if None in (in_ns, pods) else True


def rule_admits(
    rule: dict[str, Any], ports: set[int] | None, policy_ns: str, client: dict[str, Any]
) -> bool | None:
    """Whether one ingress rule admits the client on one of ``ports`` (None: the port is not known)."""
    if rule["ports"] is not None and (ports is None or not ports & set(rule["ports"])):
        if -1 not in rule["ports"] and ports is not None:
            return False
        port_ok: bool | None = None  # a named port: which number it is was not read
    else:
        port_ok = True
    if rule["peers"] is None:
        return port_ok
    verdicts = [peer_admits(peer, policy_ns, client) for peer in rule["peers"]]
    if True in verdicts:
        return port_ok
    return None if None in verdicts or port_ok is None else False


def describe_admits(rules: list[dict[str, Any]]) -> str:
    """What a policy's ingress rules admit, in words."""
    if not rules:
        return "no ingress at all"
    parts = []
    for rule in rules:
        sources = []
        for peer in rule["peers"] or []:
            if "cidr" in peer:
                sources.append(f"IP block {peer['cidr']}")
                continue
            words = []
            if "namespaces" in peer:
                ns = peer["namespaces"]
                words.append("any namespace" if ns == {} else f"namespaces {_text(ns)}")
            if "pods" in peer:
                words.append("all pods" if peer["pods"] == {} else f"pods {_text(peer['pods'])}")
            sources.append(" and ".join(words) or "any source")
        who = "any source" if rule["peers"] is None else " or ".join(sources) or "no source"
        ports = (
            "any port"
            if rule["ports"] is None
            else "port " + ", ".join("(named)" if p < 0 else str(p) for p in rule["ports"])
        )
        parts.append(f"from {who} on {ports}")
    return "; ".join(parts)


def _text(selector: Selector) -> str:
    return "(set-based)" if selector is None else ",".join(f"{k}={v}" for k, v in selector.items())


def dialled_service(host: str, client_ns: str, state: AnalysisState) -> tuple[str, str] | None:
    """The Service a dialled host names (``svc``, ``svc.ns``, ``svc.ns.svc...``); None for other hosts."""
    labels = host.split(".")
    if len(labels) == 1:
        return (labels[0], client_ns) if client_ns else None
    if len(labels) >= 3 and labels[2] == "svc":
        return labels[0], labels[1]
    known = state.fact_set("namespaces") | {row.name for row in state.inventory.of_kind("namespace", "")}
    if len(labels) == 2 and labels[1] in known:
        return labels[0], labels[1]
    return None


@register
class EndpointFactsAnalyzer(Analyzer):
    """Keeps what the ingress check needs from describes: a Service's target ports (None when one is
    named: its number is the container's, not read here) and a pod's IP."""

    name = "k8s_netpolicy_endpoint_facts"

    def applies(self, out: ToolOutput) -> bool:
        return looks_like_describe(out.text) and ("TargetPort:" in out.text or "\nIP:" in out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        label = f"{field_value(out.text, 'Namespace')}/{field_value(out.text, 'Name')}"
        if "TargetPort:" in out.text:
            numbers = [
                m.group(1).split("/", 1)[0] for m in rx.finditer(r"(?m)^TargetPort:\s+(\S+)", out.text)
            ]
            named = any(not n.isdigit() for n in numbers)
            state.fact_dict("service_target_ports")[label] = None if named else {int(n) for n in numbers}
        elif "Containers:" in out.text or "Conditions:" in out.text:
            state.fact_dict("pod_ips")[label] = field_value(out.text, "IP")
        return []


def _client(state: AnalysisState, namespace: str, pod: str) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "pod": pod,
        "labels": state.fact_dict("pod_labels").get(f"{namespace}/{pod}"),
        "ip": state.fact_dict("pod_ips").get(f"{namespace}/{pod}", ""),
    }


def _dest_selected(policy: dict[str, Any], service_selector: dict[str, str] | None) -> bool:
    """Whether a policy selects the pods a Service sends to (their labels hold the Service's selector)."""
    selector = policy["selector"]
    if selector is None:
        return True
    if not service_selector:
        return False
    return all(service_selector.get(k) == v for k, v in selector.items())


@register_correlator
def ingress_blocked_by_policy(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    failures = state.fact_dict("ingress_failures")
    for finding in findings:
        parts = finding.subject.split("/")
        target = _TARGET.search(finding.summary)
        if finding.kind != "connection_failure" or len(parts) != 3 or parts[0] != "pod" or not target:
            continue
        dialled = dialled_service(target.group(1), parts[1], state)
        if dialled is None:
            continue
        key = f"{parts[1]}/{parts[2]}>{dialled[1]}/{dialled[0]}"
        if key not in failures:
            failures[key] = int(target.group(2))
            state.lead(ObjRef("service", dialled[0], dialled[1]), "the Service a failing client dials", 78)
            state.lead(ObjRef("networkpolicy", "*", dialled[1]), "policies on the destination's ingress", 82)
    reported = state.fact_set("ingress_policy_reported")
    out: list[Finding] = []
    for key, port in failures.items():
        client_label, dest = key.split(">", 1)
        client = _client(state, *client_label.split("/", 1))
        dest_ns, service = dest.split("/", 1)
        selector = state.fact_dict("service_selectors").get(dest)
        if selector is None:
            continue
        targets = state.fact_dict("service_target_ports").get(dest, set())
        ports = None if targets is None else {port} | targets
        isolating = {
            name.split("/", 1)[1]: policy
            for name, policy in state.fact_dict("netpolicies").items()
            if name.startswith(f"{dest_ns}/")
            and policy.get("ingress") is not None
            and _dest_selected(policy, selector)
        }
        rules = [(name, rule) for name, p in isolating.items() for rule in p["ingress"]]
        if not isolating or any(rule_admits(r, ports, dest_ns, client) is not False for _, r in rules):
            continue
        report = f"{workload_of(client['pod'])} {dest} {sorted(isolating)}"
        if report in reported:
            continue
        reported.add(report)
        out.append(_finding(client, dest_ns, service, port, isolating, selector))
    return out


def _finding(
    client: dict[str, Any],
    dest_ns: str,
    service: str,
    port: int,
    isolating: dict[str, dict[str, Any]],
    selector: dict[str, str],
) -> Finding:
    names = ", ".join(sorted(isolating))
    plural = "NetworkPolicies" if len(isolating) > 1 else "NetworkPolicy"
    admits = "; ".join(
        f"{name} admits {describe_admits(p['ingress'])}" for name, p in sorted(isolating.items())
    )
    labels = client["labels"]
    who = f"{workload_of(client['pod'])} in namespace {client['namespace']}"
    if labels:
        who += f" (labels {_text(labels)})"
    return Finding(
        "network_policy_blocks_ingress",
        f"The {plural} {names} in namespace {dest_ns} isolates the ingress of the pods behind Service "
        f"{service} ({_text(selector)}) and no rule admits {who} on port {port}: {admits}. So the "
        f"client's connections to {service}:{port} time out or are refused.",
        Severity.CRITICAL,
        ObjRef("networkpolicy", sorted(isolating)[0], dest_ns).label,
        f"{names}: Ingress isolated; {admits}",
        94,
        f"Add an ingress rule admitting {who} on port {port} to a policy that selects the {service} pods "
        f"(or fix the client's labels or namespace to match what {names} admits).",
    )
