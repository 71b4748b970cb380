"""Names outside the cluster that stop resolving: the cluster DNS's forwarder for their zone.

CoreDNS answers cluster names itself (the ``kubernetes`` plugin) and forwards the rest: ``forward .`` to
the node's resolvers, and any server block ``zone:53 { forward . IP }`` (a stub zone) to that zone's own
resolvers. When a zone's forwarder does not answer, CoreDNS logs ``plugin/errors: 2 NAME. A: read udp
...->IP:53: i/o timeout`` and answers SERVFAIL: clients fail with "Temporary failure in name resolution" /
"no such host" / EAI_AGAIN for that zone only, while cluster names still resolve. Read from the clients'
logs (the names that fail), the Corefile (zone -> forwarders, and when the ConfigMap changed) and CoreDNS's
log (which upstream times out).
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
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.server_states import line_time
from diagnostics.agent.findings import Finding, ObjRef, Severity

_UNRESOLVED = rx.compile(
    r"UnknownHostException: ([\w.-]+)|getaddrinfo (?:EAI_AGAIN|ENOTFOUND) ([\w.-]+)|lookup ([\w.-]+)[^\n]*?"
    r"(?:no such host|i/o timeout|server misbehaving)|([\w.-]+\.[a-z]{2,})[:\s]+(?:Temporary failure in name "
    r"resolution|Name or service not known)",
    rx.IGNORECASE,
)
_BLOCK = rx.compile(r"^\s*([\w.-]+|\.):53\s*\{(.*?)^\s*\}", rx.MULTILINE | rx.DOTALL)
_FORWARD = rx.compile(r"^\s*forward\s+\S+\s+([^\n{]+)", rx.MULTILINE)
_UPSTREAM_TIMEOUT = rx.compile(
    r"plugin/errors: \d+ ([\w.-]+)\.? \w+: read (?:udp|tcp) [\d.:]+->([\d.]+):53: i/o timeout"
)
_ANSWERED = rx.compile(r"\"\w+ IN ([\w.-]+\.cluster\.local)\.[^\"]*\" NOERROR")
_CLUSTER = (".svc", ".cluster.local", ".local")


_ORDINAL = rx.compile(r"-\d+$")  # a StatefulSet pod's ordinal: sso-0 is StatefulSet sso's


def _in_zone(name: str, zone: str) -> bool:
    return name == zone or name.endswith("." + zone)


def _facts(state: AnalysisState) -> dict[str, Any]:
    return state.fact_dict("dns_forwarding")


@register
class DnsForwardingAnalyzer(Analyzer):
    name = "dns_forwarding"

    def applies(self, out: ToolOutput) -> bool:
        return True

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = _facts(state)
        text = out.text
        if out.is_log and "plugin/errors" in text:
            return self._coredns_log(text, state)
        if out.is_log:
            self._clients(out, state)
            return []
        if "Corefile" in text and (obj := manifest_of(text)) is not None:
            return self._corefile(obj, state)
        if out.params.get("namespace") == "kube-system" and facts.get("unresolved") and "NAME" in text:
            table = parse_table(text)
            dns = [
                r[0] for r in (table.rows if table else []) if r and rx.match(r"(coredns|kube-dns)-", r[0])
            ]
            if dns:
                state.lead(ObjRef("pod", dns[0], "kube-system"), "the cluster DNS's log", 70)
        return []

    @staticmethod
    def _clients(out: ToolOutput, state: AnalysisState) -> None:
        facts = _facts(state)
        failing: dict[str, str] = facts.setdefault("unresolved", {})
        # A continuation line ("Caused by: ...UnknownHostException", a stack frame) happened when the
        # timed line it continues did.
        moment = ""
        for line in out.text.splitlines():
            moment = line_time(line) or moment
            match = _UNRESOLVED.search(line)
            name = next((g for g in match.groups() if g), "").rstrip(".") if match else ""
            if not name or name.endswith(_CLUSTER) or "." not in name:
                continue
            if name not in failing:
                failing[name] = moment
                facts.setdefault("clients", {})[name] = str(out.params.get("pod_name") or "")
                state.lead(ObjRef("configmap", "coredns", "kube-system"), f"who forwards {name}", 95)
                state.lead(ObjRef("pod", "*", "kube-system"), "the cluster DNS", 76)

    @staticmethod
    def _corefile(obj: dict[str, Any], state: AnalysisState) -> list[Finding]:
        facts = _facts(state)
        corefile = str((obj.get("data") or {}).get("Corefile") or "")
        zones: dict[str, list[str]] = {}
        for block in _BLOCK.finditer(corefile):
            forward = _FORWARD.search(block.group(2))
            if forward and block.group(1) != ".":
                zones[block.group(1).rstrip(".")] = forward.group(1).split()
        facts["zones"] = zones
        meta = obj.get("metadata") or {}
        changed = max(
            (str(m.get("time") or "") for m in meta.get("managedFields") or [] if isinstance(m, dict)),
            default="",
        )
        failing: dict[str, str] = facts.get("unresolved", {})
        # The stub zone the failing names are in (not merely the first one the Corefile lists).
        zone = max((z for z in zones if any(_in_zone(n, z) for n in failing)), key=len, default="")
        first = min((t for n, t in failing.items() if t and zone and _in_zone(n, zone)), default="")
        name = str(meta.get("name") or "")
        if not changed or not first or not zone or not name:
            return []
        changed_at = changed.replace("T", " ").rstrip("Z")
        if not changed_at <= first or first[:10] != changed_at[:10]:
            return []
        return [
            Finding(
                "dns_forwarder_changed",
                f"The forwarder was changed in the {name} ConfigMap at {changed_at[11:16]} ({changed}), "
                "when the "
                f"failures began (first at {first}): zone {zone} now forwards to {', '.join(zones[zone])}.",
                Severity.WARNING,
                f"configmap/kube-system/{name}",
                f"managedFields time {changed}",
                82,
                f"Roll back the {name} ConfigMap's forwarder for {zone}, or make the new resolver reachable.",
            )
        ]

    @staticmethod
    def _coredns_log(text: str, state: AnalysisState) -> list[Finding]:
        facts = _facts(state)
        zones: dict[str, list[str]] = facts.get("zones", {})
        timeouts = [
            (m.group(1), m.group(2)) for ln in text.splitlines() if (m := _UPSTREAM_TIMEOUT.search(ln))
        ]
        if not timeouts:
            return []
        name, upstream = timeouts[-1][0].rstrip("."), timeouts[-1][1]
        # The zone is the Corefile's stub zone for the name, when the Corefile was read and forwards it
        # there; else the zone is unknown and said so (not the name's last two labels).
        zone = max((z for z in zones if _in_zone(name, z)), key=len, default="")
        forwards = zone and any(upstream in f for f in zones[zone])
        answered = _ANSWERED.findall(text)
        still = (
            f"; cluster names still resolve ({answered[-1]})" if answered else "; cluster names still resolve"
        )
        client = str(facts.get("clients", {}).get(name) or "")
        who = _ORDINAL.sub("", workload_of(client)) if client else "its clients"
        where = (
            f"CoreDNS forwards the zone {zone} to {upstream}, which does not answer"
            if forwards
            else f"CoreDNS's upstream {upstream} does not answer for {name} (which zone the Corefile "
            "forwards there was not observed)"
        )
        return [
            Finding(
                "dns_forwarder_unanswered",
                f"{where} (i/o timeout, {len(timeouts)} queries), so {who} cannot resolve {name} and what "
                f"needs it fails{still}.",
                Severity.CRITICAL,
                f"dns/{zone if forwards else name}",
                f"read udp ->{upstream}:53: i/o timeout",
                92,  # the cause of its clients' resolution failures
                f"Point the {zone} forwarder back at a resolver that answers "
                f"(or open the path to {upstream}:53)."
                if forwards
                else f"Read the cluster DNS's Corefile for what forwards {name} to {upstream}, and make that "
                "resolver answer.",
            )
        ]
