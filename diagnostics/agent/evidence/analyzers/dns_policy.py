"""A pod asking a resolver other than the cluster DNS: its ``dnsPolicy`` or ``dnsConfig`` is not the cluster's

With ``dnsPolicy: ClusterFirst`` (the default) the kubelet writes the cluster DNS Service's ClusterIP
(``kube-dns`` in ``kube-system``) as the pod's nameserver, with the cluster search domains. ``Default``
gives the pod the node's resolv.conf instead (the VPC or host resolver, which knows no
``*.svc.cluster.local`` names); ``None`` takes only ``dnsConfig.nameservers``; ``ClusterFirst`` on
``hostNetwork: true`` falls back to ``Default`` (``ClusterFirstWithHostNet`` is the one that keeps the
cluster DNS there). A failed lookup names the resolver it asked (Go: ``lookup NAME on 10.0.0.2:53: no
such host``; ``nameserver X`` of a resolv.conf; nslookup's ``Server:``): compared with the kube-dns
Service's ClusterIP and read with the pod's policy, it says whether the pod asks the wrong server.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

SYSTEM_NAMESPACE = "kube-system"
_IP = r"\d{1,3}(?:\.\d{1,3}){3}|\[?[0-9a-fA-F:]*:[0-9a-fA-F:]+\]?"
_LOOKUP = rx.compile(
    rf"lookup ([\w.-]+)(?: on ({_IP}):53)?: (no such host|server misbehaving|i/o timeout|"
    r"connection refused|Temporary failure in name resolution)"
)
_NAMESERVER = rx.compile(rf"(?m)^\s*(?:nameserver|Server:)\s+({_IP})\s*$")
_CANT_FIND = rx.compile(r"server can't find ([\w.-]+)[:.]? ?(NXDOMAIN|SERVFAIL|REFUSED)?")
_CLUSTER_NAME = rx.compile(r"^([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.[a-z0-9.-]+)?$")
_WAIT = 3  # reads with data the finding waits for the cluster DNS Service's address


@register
class DnsPolicyAnalyzer(Analyzer):
    name = "dns_policy"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        if not out.ok or out.no_data:
            return []
        facts = state.fact_dict("dns_policy")
        if facts.get("waiting"):
            note_wait(facts, out)
        kind = str(out.params.get("kind") or "").lower()
        namespace = str(out.params.get("namespace") or "")
        if (obj := manifest_of(out.text)) is not None and obj.get("kind") == "Pod":
            self._pod(obj, facts)
        elif kind in ("service", "services", "svc") and (table := parse_table(out.text)) is not None:
            for row in table.rows:
                name, address = (row[0] if row else ""), table.column(row, "CLUSTER-IP")
                facts.setdefault("services", set()).add(f"{namespace}/{name}")
                if namespace == SYSTEM_NAMESPACE and "dns" in name and rx.fullmatch(_IP, address):
                    facts["cluster_dns"] = (name, address)
        elif out.is_log or "nameserver" in out.text:
            self._resolver(out, state, facts)
        return self._findings(facts)

    @staticmethod
    def _pod(obj: dict[str, Any], facts: dict[str, Any]) -> None:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(meta, dict) and isinstance(spec, dict)
        config = spec.get("dnsConfig") if isinstance(spec.get("dnsConfig"), dict) else {}
        assert isinstance(config, dict)
        containers = [c.get("name") for c in spec.get("containers") or [] if isinstance(c, dict)]
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        facts.setdefault("pods", {})[key] = {
            "name": str(meta.get("name") or ""),
            "namespace": str(meta.get("namespace") or ""),
            "policy": str(spec.get("dnsPolicy") or "ClusterFirst"),
            "host_network": spec.get("hostNetwork") is True,
            "nameservers": [str(n) for n in config.get("nameservers") or []][:5],
            "container": str(containers[0]) if len(containers) == 1 else "",
        }

    @staticmethod
    def _resolver(out: ToolOutput, state: AnalysisState, facts: dict[str, Any]) -> None:
        pod = str(out.params.get("pod_name") or out.params.get("name") or "")
        namespace = str(out.params.get("namespace") or "")
        failure: dict[str, str] = {}
        lookup = _LOOKUP.search(out.text)
        server = _NAMESERVER.search(out.text)
        cant = _CANT_FIND.search(out.text)
        if lookup is not None and lookup.group(2):
            failure["resolver"] = lookup.group(2).strip("[]")
            failure["name"], failure["answer"] = lookup.group(1).lower(), lookup.group(3)
            failure["line"] = clip(lookup.group(0))
        elif server is not None and (cant is not None or lookup is not None):
            failure["resolver"] = server.group(1).strip("[]")
            failed = cant or lookup
            assert failed is not None
            failure["name"] = failed.group(1).lower()
            failure["answer"] = (cant.group(2) if cant else lookup.group(3) if lookup else "") or "not found"
            failure["line"] = clip(failed.group(0))
        else:
            return
        facts.setdefault("failures", {}).setdefault(f"{namespace}/{pod}", failure)
        if not facts.get("waiting"):
            facts["waiting"] = True
            start_wait(facts)
        state.lead(ObjRef("service", "*", SYSTEM_NAMESPACE), "the cluster DNS Service's address", 72)
        if pod and namespace:
            state.lead(ObjRef("pod", pod, namespace), "the pod's dnsPolicy and dnsConfig", 70)

    @staticmethod
    def _policy_words(pod: dict[str, Any]) -> str:
        policy, servers = pod["policy"], ", ".join(pod["nameservers"])
        if policy == "Default":
            return "the pod sets dnsPolicy Default: it asks the node's resolver"
        if policy == "None":
            return f"the pod sets dnsPolicy None with dnsConfig nameservers {servers or '(none)'}: it asks"
        if pod["host_network"] and policy == "ClusterFirst":
            return (
                "the pod runs on hostNetwork with dnsPolicy ClusterFirst, which falls back to Default: "
                "it asks the node's resolver"
            )
        if pod["nameservers"]:
            return f"the pod's dnsConfig adds nameservers {servers}: it asks"
        return ""

    def _findings(self, facts: dict[str, Any]) -> list[Finding]:
        """One finding per pod whose own log names the resolver it asked (a pod's policy is its own)."""
        found = []
        pods: dict[str, dict[str, Any]] = facts.get("pods", {})
        for key, failure in facts.get("failures", {}).items():
            reported = facts.setdefault("reported", set())
            if key in pods and key not in reported:
                finding = self._finding(pods[key], failure, facts)
                if finding is not None:
                    reported.add(key)
                    found.append(finding)
        return found

    def _finding(self, pod: dict[str, Any], failure: dict[str, str], facts: dict[str, Any]) -> Finding | None:
        resolver, dns = failure["resolver"], facts.get("cluster_dns")
        if dns is None and still_waiting(facts, _WAIT):
            return None
        if dns is not None and dns[1] == resolver:
            return None  # the pod asks the cluster DNS: its policy is not why the lookup fails
        words = self._policy_words(pod)
        if not words:
            return None
        name = failure["name"]
        cluster = _CLUSTER_NAME.match(name)
        knows = " (a cluster name only the cluster DNS knows)" if cluster else ""
        instead = (
            f"instead of the cluster DNS (Service {dns[0]}, ClusterIP {dns[1]})"
            if dns is not None
            else "instead of the cluster DNS"
        )
        exists = ""
        if cluster and f"{cluster.group(2)}/{cluster.group(1)}" in facts.get("services", set()):
            exists = f", though the Service {cluster.group(1)} exists in namespace {cluster.group(2)}"
        container = f"Container {pod['container']} of pod" if pod["container"] else "Pod"
        subject = f"pod/{pod['namespace']}/{pod['name']}" if pod["namespace"] else f"pod/{pod['name']}"
        fix = (
            "Set dnsPolicy: ClusterFirstWithHostNet on a hostNetwork pod"
            if pod["host_network"]
            else "Remove the dnsPolicy (ClusterFirst is the default) or the dnsConfig nameservers override"
        )
        return Finding(
            "dns_policy_not_cluster",
            f"{container} {pod['name']} cannot resolve {name}{knows}: {words} {resolver}, which knows "
            f"no cluster names ({failure['answer']}), {instead}{exists}.",
            Severity.CRITICAL,
            subject,
            failure["line"],
            94,  # above the log's DNS failure: this says why the lookup fails
            f"{fix}, so the pod asks the cluster DNS; keep the node resolver only for pods that need no "
            "cluster names.",
        )
