"""Writes sent to a replica: the client is pinned to a node that a failover demoted.

Replicated datastores refuse writes on their replicas, each in its own words: Redis "READONLY You can't
write against a read only replica", PostgreSQL "cannot execute INSERT in a read-only transaction" (a hot
standby), MySQL "is running with the --read-only option", MongoDB "NotWritablePrimary" / "not master".
Reads keep working, so health checks pass while every write fails. After a failover (Redis Sentinel's
``+switch-master <name> <old ip> <port> <new ip> <port>``, a promotion) the node a client addresses
directly (a pod's own DNS name, an IP) is a replica; a client must follow the current primary (a
Sentinel-aware client, the primary's Service).

Read from the client's log (the refusal), the datastore pods' logs (the switchover), the pod listing
(-o wide: which pod had which IP) and the client pod's describe (the address it is configured with).
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
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.findings import Finding, ObjRef, Severity

_REFUSALS = (
    ("redis", rx.compile(r"READONLY You can't write against a read only (?:replica|slave)")),
    ("postgres", rx.compile(r"cannot execute \w+ in a read-only transaction")),
    ("mysql", rx.compile(r"is running with the --read-only option")),
    ("mongo", rx.compile(r"NotWritablePrimary|not master and slaveOk=false|\bnot master\b")),
)
_SWITCH = rx.compile(r"(\d\d \w{3} \d{4} [\d:.]+)?[^\n]*\+switch-master (\S+) ([\d.]+) \d+ ([\d.]+) \d+")
_ENV = rx.compile(r"^\s+([A-Z][A-Z0-9_]+):\s+(\S+)", rx.MULTILINE)


@register
class ReplicaWriteAnalyzer(Analyzer):
    name = "replica_writes"

    def applies(self, out: ToolOutput) -> bool:
        return True  # the client's log, the datastore's logs, the listing and the client's describe

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("replica_writes")
        text = out.text
        namespace = str(out.params.get("namespace") or "")
        findings: list[Finding] = []
        if out.is_log and not facts.get("engine"):
            for engine, pattern in _REFUSALS:
                lines = [ln for ln in text.splitlines() if pattern.search(ln)]
                if lines:
                    _src, subject, where = log_subject(out, state)
                    client = str(out.params.get("pod_name") or "")
                    facts.update(engine=engine, client=client, subject=subject, namespace=namespace)
                    findings.append(
                        Finding(
                            "write_to_replica",
                            f"Writes fail{where}: the {engine} server they go to is a read-only replica "
                            f"({len(lines)} lines: '{clip(lines[-1], 160)}'); reads still work. After a "
                            "failover the node a client addresses directly is a replica: the client must "
                            "follow the current primary.",
                            Severity.CRITICAL,
                            subject,
                            clip(lines[-1]),
                            80,
                            "Point the client at the current primary (a Sentinel- or cluster-aware client, "
                            "the primary's Service) instead of one node.",
                        )
                    )
                    if namespace:
                        state.lead(ObjRef("pod", "*", namespace), f"the {engine} pods and their roles", 80)
                        state.lead(ObjRef("pod", client, namespace), "the address it writes to", 80)
                    break
        # What the chain needs, kept whichever comes first: who had which IP, each pod's environment.
        table = parse_table(text) if not out.is_log and "IP" in text and "NAME" in text else None
        if table is not None and "IP" in table.header:
            facts.setdefault("ips", {}).update({table.column(r, "IP"): r[0] for r in table.rows if r})
            facts.setdefault("pods", {})[namespace] = [r[0] for r in table.rows if r]
        if not out.is_log and (pod := field_value(text, "Name")) and "Environment:" in text:
            facts.setdefault("envs", {})[pod] = _ENV.findall(text.split("Environment:", 1)[1])
        if out.is_log and (switch := _SWITCH.search(text)):
            facts["switch"] = (switch.group(1) or "", switch.group(2), switch.group(3), switch.group(4))
        if not facts.get("engine"):
            return findings
        engine = facts["engine"]
        if not facts.get("led"):
            facts["led"] = True
            for pod in (facts.get("pods") or {}).get(facts["namespace"], []):
                if engine in pod:
                    state.lead(ObjRef("pod", pod, facts["namespace"]), f"the {engine} pod's log", 78)
        envs = (facts.get("envs") or {}).get(facts["client"]) or []
        facts["env"] = [f"{k}={v}" for k, v in envs if engine in v.lower()]
        return findings + self._finding(facts)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        if facts.get("reported") or not facts.get("switch") or not facts.get("ips"):
            return []
        when, name, old_ip, new_ip = facts["switch"]
        ips: dict[str, str] = facts["ips"]
        old, new = ips.get(old_ip, old_ip), ips.get(new_ip, new_ip)
        env = [e for e in facts.get("env") or [] if old in e] or facts.get("env") or []
        if not env and not facts.get("waited_env"):
            facts["waited_env"] = True  # one more read for the client's address
            return []
        facts["reported"] = True
        pinned = f" it connects directly to {old} ({', '.join(env)})," if env else ""
        summary = (
            f"Writes from {facts['client']} fail with READONLY:{pinned} which became a replica when "
            f"Sentinel failed over {name}{f' at {when}' if when else ''} and promoted {new} ({new_ip}) to "
            f"master (switch-master {old_ip} -> {new_ip}); the client does not follow the Sentinel master, "
            "so every write goes to the demoted node."
        )
        return [
            Finding(
                "write_to_demoted_primary",
                clip(summary, 700),
                Severity.CRITICAL,
                str(facts["subject"]),
                f"+switch-master {name} {old_ip} -> {new_ip}",
                88,
                f"Have {facts['client']} discover the master through Sentinel (or a Service that follows it) "
                f"instead of {old}.",
            )
        ]
