"""NetworkPolicies in a failing pod's lineage, read by the API's own selection and isolation rules.

A NetworkPolicy selects the pods of its namespace whose labels match ``spec.podSelector`` (empty: every
pod there). A selected pod is isolated for each direction the policy's ``policyTypes`` declares
(``Egress`` also when the policy has an ``egress`` section): it may then send only what some selecting
policy's rules allow, the union of them. An egress rule without ``ports`` allows every port, without
``to`` every destination; a policy with Egress and no rule allows nothing, DNS (port 53, UDP and TCP, to
kube-dns in kube-system) included, so every lookup by name times out.

Reads: the policies (``kubectl describe networkpolicy``, a manifest), a pod's labels and readiness
(describe), a lineage tree or a listing naming policies (each is then read). The ingress direction
(a policy on the destination's pods that admits not the failing client) is netpolicy_ingress.py.
A pod whose logs show DNS
lookups or connections timing out leads to the policies of its namespace; a policy that selects it,
isolates its egress and allows neither DNS nor the failing port is named as the cause.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    field_value,
    looks_like_describe,
    parse_table,
    register,
    register_correlator,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import _part, manifest_of
from diagnostics.agent.evidence.analyzers.kubernetes.netpolicy_ingress import (
    ingress_of_describe,
    ingress_of_manifest,
)
from diagnostics.agent.evidence.analyzers.network import parse_selector
from diagnostics.agent.findings import Finding, ObjRef, Severity

_LINEAGE_POLICY = rx.compile(r"NetworkPolicy/([a-z0-9][-a-z0-9.]*)")
_LOOKUP = rx.compile(r"lookup\s+(\S+?)\s+on\s")
_TARGET = rx.compile(r"\bat\s+(\S+?:(\d+))\b")
_EGRESS_FAILURES = ("dns_server_unanswered", "connection_failure")
DNS_PORT = 53


def _rule(lines: list[str]) -> dict[str, Any]:
    """One rule of a describe's ``Allowing egress traffic:`` section: its ports (None: any) and peers."""
    ports: list[int] | None = []
    peers: list[str] | None = []
    for line in lines:
        text = line.strip()
        if text.startswith("To Port:") or text.startswith("From Port:"):
            value = text.split(":", 1)[1].strip()
            if value.startswith("<any>"):
                ports = None
            elif ports is not None:
                number = value.split("/", 1)[0]
                ports.append(int(number) if number.isdigit() else -1)
        elif text.startswith(("To:", "From:")):
            if "<any>" in text:
                peers = None
        elif peers is not None and text.split(":", 1)[0] in ("PodSelector", "NamespaceSelector", "IPBlock"):
            peers.append(text)
    return {"ports": ports, "peers": peers}


def _section(text: str, title: str) -> list[dict[str, Any]] | None:
    """The rules under ``Allowing <direction> traffic:``; [] when it isolates; None when not affected."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == title), None)
    if start is None:
        return None
    indent = len(lines[start]) - len(lines[start].lstrip())
    body: list[str] = []
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
    if any("isolated for" in line for line in body):
        return []
    rules: list[dict[str, Any]] = []
    current: list[str] = []
    for line in body:
        if line.strip().startswith("----"):
            rules.append(_rule(current))
            current = []
        elif line.strip():
            current.append(line)
    if current:
        rules.append(_rule(current))
    return rules


def parse_policy_describe(text: str) -> dict[str, Any]:
    selector_text = field_value(text, "PodSelector") or rx.sub(
        r"^.*PodSelector:\s*", "", next((ln for ln in text.splitlines() if "PodSelector:" in ln), "")
    )
    types = {t.strip() for t in rx.sub(r"^.*Policy Types:", "", _line(text, "Policy Types:")).split(",")}
    return {
        "selector": None
        if selector_text.startswith("<none>")
        else parse_selector(selector_text.split(" (")[0]),
        "types": {t for t in types if t},
        "egress": _section(text, "Allowing egress traffic:"),
        "ingress": ingress_of_describe(text),
    }


def _line(text: str, marker: str) -> str:
    return next((line for line in text.splitlines() if marker in line), "")


def parse_policy_manifest(obj: dict[str, Any]) -> dict[str, Any]:
    spec = _part(obj, "spec")
    match_labels = _part(spec, "podSelector").get("matchLabels") or {}
    types = {str(t) for t in spec.get("policyTypes") or []} or {"Ingress"}
    if "egress" in spec:
        types.add("Egress")
    rules = []
    for rule in spec.get("egress") or []:
        if not isinstance(rule, dict):
            continue
        ports = rule.get("ports")
        rules.append(
            {
                "ports": None
                if not ports
                else [
                    int(p["port"]) if str(p.get("port", "")).isdigit() else -1
                    for p in ports
                    if isinstance(p, dict)
                ],
                "peers": None if not rule.get("to") else [str(peer) for peer in rule["to"]],
            }
        )
    return {
        "selector": {str(k): str(v) for k, v in match_labels.items()} or None,
        "types": types,
        "egress": rules if "Egress" in types else None,
        "ingress": ingress_of_manifest(spec),
    }


def allows_port(rules: list[dict[str, Any]], port: int, namespace: str) -> bool:
    """Whether any egress rule lets a port through to where it must go (DNS: kube-dns, another namespace)."""
    for rule in rules:
        if rule["ports"] is not None and port not in rule["ports"]:
            continue
        peers = rule["peers"]
        if peers is None or port != DNS_PORT or namespace == "kube-system":
            return True
        if any(not p.startswith("PodSelector") for p in peers):  # a namespace selector or an IP block
            return True
    return False


def _selects(policy: dict[str, Any], labels: dict[str, str] | None) -> bool:
    selector = policy["selector"]
    if selector is None:
        return True
    return labels is not None and all(labels.get(k) == v for k, v in selector.items())


@register
class PolicyRulesAnalyzer(Analyzer):
    name = "k8s_network_policy_rules"

    def applies(self, out: ToolOutput) -> bool:
        return (
            "NetworkPolicy" in out.text
            or ("PodSelector:" in out.text and "Policy Types" in out.text)
            or str(out.params.get("kind") or "").lower() in ("networkpolicy", "networkpolicies", "netpol")
            or (looks_like_describe(out.text) and "Labels:" in out.text and "Conditions:" in out.text)
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        namespace = str(out.params.get("namespace") or "")
        policies = state.fact_dict("netpolicies")
        if "PodSelector:" in out.text and "Policy Types" in out.text:
            ns = field_value(out.text, "Namespace") or namespace
            policies[f"{ns}/{field_value(out.text, 'Name')}"] = parse_policy_describe(out.text)
            return []
        obj = manifest_of(out.text)
        if obj is not None and obj.get("kind") == "NetworkPolicy":
            meta = _part(obj, "metadata")
            policies[f"{meta.get('namespace') or namespace}/{meta.get('name')}"] = parse_policy_manifest(obj)
            return []
        if looks_like_describe(out.text) and "Conditions:" in out.text:
            _keep_pod(out.text, state)
            return []
        names = _LINEAGE_POLICY.findall(out.text)
        listing = str(out.params.get("kind") or "").lower() in ("networkpolicy", "networkpolicies", "netpol")
        table = parse_table(out.text) if listing else None
        if not names and table is not None and "POD-SELECTOR" not in table.header:
            names = [row[1] if "NAMESPACE" in table.header else row[0] for row in table.rows if len(row) > 1]
        for name in dict.fromkeys(names[:8]):
            state.lead(ObjRef("networkpolicy", name, namespace), "a NetworkPolicy on the pod's traffic", 84)
        return []


def _keep_pod(text: str, state: AnalysisState) -> None:
    name, namespace = field_value(text, "Name"), field_value(text, "Namespace")
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Labels:")), None)
    if start is not None:
        labels = [lines[start].split(":", 1)[1].strip()]
        for line in lines[start + 1 :]:
            if not line.startswith(" ") or ":" in line.split("=", 1)[0]:
                break
            labels.append(line.strip())
        state.fact_dict("pod_labels")[f"{namespace}/{name}"] = parse_selector(",".join(labels))
    if rx.search(r"^\s+Ready\s+False\b", text, rx.MULTILINE):
        state.fact_set("pods_not_ready").add(f"{namespace}/{name}")


@register_correlator
def egress_blocked_by_policy(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    failures = state.fact_dict("egress_failures")
    for finding in findings:
        parts = finding.subject.split("/")
        if finding.kind in _EGRESS_FAILURES and len(parts) == 3 and parts[0] == "pod":
            text = f"{finding.summary} {finding.evidence}"
            host = _LOOKUP.search(text)
            target = _TARGET.search(finding.summary)
            port = DNS_PORT if host or (target and target.group(2) == str(DNS_PORT)) else None
            if port is None and target:
                port = int(target.group(2))
            failures.setdefault(f"{parts[1]}/{parts[2]}", {"host": "", "ports": set()})
            failures[f"{parts[1]}/{parts[2]}"]["ports"].add(port)
            if host:
                failures[f"{parts[1]}/{parts[2]}"]["host"] = host.group(1)
            state.lead(ObjRef("networkpolicy", "*", parts[1]), "policies that may block the pod's egress", 83)
    reported = state.fact_set("egress_policy_reported")
    out: list[Finding] = []
    for pod_label, failure in failures.items():
        namespace, pod = pod_label.split("/", 1)
        labels = state.fact_dict("pod_labels").get(pod_label)
        isolating = {
            name.split("/", 1)[1]: policy
            for name, policy in state.fact_dict("netpolicies").items()
            if name.startswith(f"{namespace}/") and "Egress" in policy["types"] and _selects(policy, labels)
        }
        if not isolating:
            continue
        rules = [rule for policy in isolating.values() for rule in policy["egress"] or []]
        blocked = sorted(
            p for p in failure["ports"] if p is not None and not allows_port(rules, p, namespace)
        )
        key = f"{workload_of(pod)} {namespace} {sorted(isolating)} {blocked}"
        if not blocked or key in reported:
            continue
        reported.add(key)
        out.append(_finding(namespace, pod, isolating, rules, blocked, failure, state))
    return out


def _finding(
    namespace: str,
    pod: str,
    isolating: dict[str, dict[str, Any]],
    rules: list[dict[str, Any]],
    blocked: list[int],
    failure: dict[str, Any],
    state: AnalysisState,
) -> Finding:
    workload = workload_of(pod)
    names = ", ".join(sorted(isolating))
    plural = "NetworkPolicies" if len(isolating) > 1 else "NetworkPolicy"
    selects = "; ".join(
        f"{name} selects "
        + (
            "every pod in the namespace"
            if p["selector"] is None
            else ",".join(f"{k}={v}" for k, v in p["selector"].items())
        )
        + f", policyTypes {', '.join(sorted(p['types']))}"
        for name, p in sorted(isolating.items())
    )
    what = "all egress" if not rules else f"egress to port {', '.join(map(str, blocked))}"
    dns = DNS_PORT in blocked
    summary = (
        f"The {plural} {names} blocks {what} from the {workload} pods in namespace {namespace} "
        f"({selects}; {'no egress rule' if not rules else 'no rule allows it'})"
    )
    if dns:
        host = failure["host"] or "every name"
        summary += f", DNS included (UDP/TCP 53 to kube-dns), so lookups of {host} time out"
    if f"{namespace}/{pod}" in state.fact_set("pods_not_ready"):
        summary += " and the pods stay not ready"
    allow = "DNS (UDP and TCP 53 to kube-dns in kube-system) and " if dns else ""
    return Finding(
        "network_policy_blocks_egress",
        summary + ".",
        Severity.CRITICAL,
        ObjRef("networkpolicy", sorted(isolating)[0], namespace).label,
        f"{names}: Egress isolated; {len(rules)} egress rule(s)",
        94,
        f"Add an egress rule that allows {allow}the pods' destinations to a policy that selects them, "
        f"or remove {names} if applied by mistake.",
    )
