"""A node agent that does not run: what the node should offer, it does not.

Some of what a pod needs from its node is offered by an agent pod on that node, usually a DaemonSet's in
``kube-system``: the network plugin (Calico, Cilium, Flannel, the cloud's CNI) that gives a pod its
sandbox, a device plugin that advertises an extended resource (``nvidia.com/gpu``, ``amd.com/gpu``) in
the node's Allocatable, a CSI node plugin that mounts volumes. When that agent crashes on a node, the
workload's pods fail there in the agent's terms, not their own:

- ``FailedScheduling ... Insufficient nvidia.com/gpu``: a node whose device plugin does not run
  advertises none of the resource, so the scheduler finds no room however many devices it has;
- ``FailedCreatePodSandBox`` (``plugin type="calico" failed``, ``network plugin not ready``, ``cni``):
  the network plugin's agent on that node is not running.

Read from the refusal (events, describe), the pod listings with a NODE column (which agent pods on which
nodes are not running), the node describes (Allocatable) and the agent's log (its last error lines).
The finding waits a few reads for the agent's log.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.evidence.logtemplates import is_error_line
from diagnostics.agent.findings import Finding, ObjRef, Severity

_EXTENDED = rx.compile(r"Insufficient ([a-z0-9.-]+\.[a-z]+/[\w.-]+)")
_SANDBOX = rx.compile(
    r"FailedCreatePodSandBox|network plugin (?:is )?not ready|cni (?:config|plugin) (?:uninitialized|not)|"
    r"failed to setup network for sandbox",
    rx.IGNORECASE,
)
_PLUGIN = rx.compile(r"plugin type=\"?([\w-]+)\"?")
_HEALTHY = frozenset({"Running", "Completed", "Succeeded"})
_CAUSE = rx.compile(
    r"could not|couldn.t|cannot|can.t|unable to|no such|not found|failed to|permission denied|refused", rx.I
)
_WAIT = 4


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _ready(cell: str) -> bool:
    parts = cell.split("/")
    return len(parts) == 2 and parts[0] == parts[1] and parts[0] != "0"


def _key_lines(text: str) -> list[str]:
    """What the agent's log says failed: the first line that names a cause (an agent logs the cause, then
    its consequences and hints), and its last error-class line (why it exits)."""
    lines = [_body(ln) for ln in text.splitlines() if ln.strip()]
    cause = next((ln for ln in lines if _CAUSE.search(ln)), "")
    last = next((ln for ln in reversed(lines) if is_error_line(ln) or _CAUSE.search(ln)), "")
    return [ln for ln in dict.fromkeys((cause, last)) if ln]


def _body(line: str) -> str:
    """A log line without its klog / timestamp prefix."""
    return rx.sub(r"^[IWEF]\d{4}\s+\S+\s+\d+\s+\S+\]\s*|^\d{4}-\d\d-\d\d[T ][\d:.]+Z?\s*", "", line.strip())


def _env(obj: dict[str, Any]) -> dict[str, str]:
    """The literal environment settings of a workload's containers."""
    spec = _dict(obj.get("spec"))
    template = _dict(spec.get("template"))
    pod_spec = _dict(template.get("spec"))
    settings: dict[str, str] = {}
    for container in pod_spec.get("containers") or []:
        for item in (container.get("env") or []) if isinstance(container, dict) else []:
            if isinstance(item, dict) and isinstance(item.get("value"), str):
                settings[str(item.get("name"))] = item["value"]
    return settings


def _named_settings(settings: dict[str, str], said: list[str]) -> list[str]:
    """The settings the failing lines are about: a word of the setting's name (6+ letters) that a word of
    the lines begins with ("auto-detect" and IP_AUTODETECTION_METHOD)."""
    words = {w.replace("-", "") for w in rx.findall(r"[a-z][a-z-]{5,}", " ".join(said).lower())}
    named = []
    for name, value in settings.items():
        parts = [p for p in name.lower().split("_") if len(p) >= 6]
        if any(p.startswith(w) or w.startswith(p) for p in parts for w in words if len(w) >= 6):
            named.append(f"{name}={value}")
    return named[:3]


@register
class NodeAgentAnalyzer(Analyzer):
    name = "node_agents"

    def applies(self, out: ToolOutput) -> bool:
        return True  # refusals, listings, node describes and the agents' logs all matter

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("node_agents")
        text = out.text
        if facts.get("signs"):
            note_wait(facts, out)
        self._read_signs(out, state, facts)
        self._read_listing(out, state, facts)
        agents = facts.get("agents", {})
        if out.is_log and (pod := str(out.params.get("pod_name") or "")) in agents:
            facts.setdefault("logs", {})[pod] = _key_lines(text)
            owner = rx.sub(r"-[a-z0-9]{5}$", "", pod)
            state.lead(ObjRef("daemonset", owner, agents[pod]["namespace"]), "the agent's settings", 84)
        if facts.get("logs") and "env" in text and (obj := manifest_of(text)):
            facts["settings"] = _env(obj)
        return self._finding(facts)

    @staticmethod
    def _read_signs(out: ToolOutput, state: AnalysisState, facts: dict[str, Any]) -> None:
        text = out.text
        signs = facts.setdefault("signs", {})
        for resource in _EXTENDED.findall(text):
            if resource not in signs:
                signs[resource] = {"kind": "resource", "vendor": resource.split(".")[0]}
                start_wait(facts)
                state.lead(ObjRef("pod", "*", "kube-system"), f"the agents that advertise {resource}", 83)
        node = field_value(text, "Node").split("/")[0] if _SANDBOX.search(text) else ""
        if node not in ("", "<none>") and node not in signs:
            plugin = _PLUGIN.search(text)
            signs[node] = {"kind": "sandbox", "plugin": plugin.group(1) if plugin else ""}
            start_wait(facts)
            state.lead(ObjRef("pod", "*", "kube-system"), f"the network agent on node {node}", 83)

    @staticmethod
    def _read_listing(out: ToolOutput, state: AnalysisState, facts: dict[str, Any]) -> None:
        signs = facts.get("signs") or {}
        if not signs or "NODE" not in out.text or out.is_log:
            return
        table = parse_table(out.text)
        if table is None or "NODE" not in table.header or "STATUS" not in table.header:
            return
        namespace = str(out.params.get("namespace") or "")
        agents = facts.setdefault("agents", {})
        for row in table.rows:
            if len(row) < 3:
                continue
            name, status, node = row[0], table.column(row, "STATUS"), table.column(row, "NODE")
            if status in _HEALTHY and _ready(table.column(row, "READY")):
                continue
            for key, sign in signs.items():
                if sign["kind"] == "resource":
                    matches = sign["vendor"] in name or "device-plugin" in name
                else:
                    plugin = sign.get("plugin") or ""
                    matches = node == key and (not plugin or plugin in name or namespace == "kube-system")
                if matches and name not in agents:
                    agents[name] = {"node": node, "status": status, "sign": key, "namespace": namespace}
                    state.lead(ObjRef("pod", name, namespace), f"the node agent {name} on {node}", 86)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        agents: dict[str, dict[str, str]] = facts.get("agents") or {}
        logs: dict[str, list[str]] = facts.get("logs") or {}
        if facts.get("reported") and facts.get("settings") and not facts.get("restated"):
            facts["restated"] = True  # the agent's settings came after: say it again, with them
            facts["reported"] = False
        if not agents or facts.get("reported"):
            return []
        if not logs and still_waiting(facts, _WAIT):
            return []
        facts["reported"] = True
        findings = []
        for key, sign in (facts.get("signs") or {}).items():
            mine = {n: a for n, a in agents.items() if a["sign"] == key}
            if not mine:
                continue
            listed = ", ".join(f"{n} on {a['node']} ({a['status']})" for n, a in sorted(mine.items()))
            said = next((logs[n] for n in sorted(mine) if logs.get(n)), [])
            log = f"; its log says: {' | '.join(said)}" if said else ""
            named = _named_settings(facts.get("settings") or {}, said)
            if facts.get("restated") and not named:
                continue
            if named:
                log += f" (its settings: {', '.join(named)})"
            nodes = ", ".join(sorted({a["node"] for a in mine.values()}))
            if sign["kind"] == "resource":
                summary = (
                    f"No node offers free {key} to the Pending pods: {key} is advertised by a device plugin "
                    f"on each node, and the device plugin pods {listed} do not run, so nodes {nodes} "
                    f"advertise no {key} (FailedScheduling: Insufficient {key}){log}."
                )
                fix = f"Fix the device plugin (its driver / container toolkit) on {nodes}."
            else:
                summary = (
                    f"Pods on node {key} cannot get a pod sandbox (network): the network plugin's (CNI) "
                    f"agent {listed} does not run there{log}."
                )
                fix = f"Fix the network plugin's agent on {key}."
            first = sorted(mine)[0]
            findings.append(
                Finding(
                    "node_agent_down",
                    clip(summary, 900),
                    Severity.CRITICAL,
                    f"pod/{mine[first]['namespace']}/{first}",
                    clip(" | ".join(said) or listed, 300),
                    94 if named else 93,
                    fix,
                )
            )
        return findings
