"""The clients of a server that refuses or stops work: who is affected, and who caused it.

A broker in a resource alarm blocks its publishers; a replica whose applier stopped on a conflict was
written to by someone other than replication. Both answers are in the clients' logs, so once a server
analyzer has recorded such a state (``state.facts["stuck_servers"]``: namespace -> server pod), the pods
listed in that namespace that are not the server's own are leads, and a client's log that writes to a
replica is a finding.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.server_states import iso, line_time, pod_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

MAX_CLIENTS = 4
_WRITE = rx.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)\s+`?([\w.]+)`?(?:[^\n]*?(\d+) rows? affected)?",
    rx.IGNORECASE,
)


def want_clients(state: AnalysisState, namespace: str, server: str) -> None:
    """Ask for the pods of ``namespace`` (their clients' logs) once ``server`` is known to be stuck."""
    if namespace and server:
        state.fact_dict("stuck_servers")[namespace] = server
        state.lead(ObjRef("pod", "*", namespace), f"clients of {server}", 60)


def _family(name: str) -> str:
    """The StatefulSet or workload a pod belongs to: ``rabbitmq-0`` -> ``rabbitmq``."""
    return rx.sub(r"-\d+$", "", workload_of(name))


@register
class ServerClientsAnalyzer(Analyzer):
    name = "server_clients"

    def applies(self, out: ToolOutput) -> bool:
        return "NAME" in out.text or (out.is_log and bool(_WRITE.search(out.text)))

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        stuck = state.fact_dict("stuck_servers")
        if not stuck:
            return []
        if out.is_log:
            return self._writes(out, state)
        namespace = str(out.params.get("namespace") or "")
        server = str(stuck.get(namespace) or "")
        table = parse_table(out.text)
        if not server or table is None or "NAME" not in table.header:
            return []
        ours = _family(server)
        clients = [row[0] for row in table.rows if row and _family(row[0]) != ours]
        seen: set[str] = set()
        for name in clients:
            if workload_of(name) in seen or len(seen) >= MAX_CLIENTS:
                continue
            seen.add(workload_of(name))
            state.lead(ObjRef("pod", name, namespace), f"a client of {server}: its log", 55)
        return []

    @staticmethod
    def _writes(out: ToolOutput, state: AnalysisState) -> list[Finding]:
        """A client's log that connects to a stuck replica and writes rows into it."""
        appliers = state.fact_dict("replica_applier")
        text = out.text
        replica = next((r for r in appliers if r and r in text), "")
        lines = [ln for ln in text.splitlines() if _WRITE.search(ln)]
        if not replica or not lines or replica == pod_of(out):
            return []
        match = _WRITE.search(lines[-1])
        table = match.group(1) if match else "its tables"
        rows = f"{match.group(2)} rows" if match and match.group(2) else "rows"
        who = pod_of(out) or "a client"
        scheduled = rx.search(r"^(.*-\d{6,})-[a-z0-9]{5}$", who)  # a CronJob's Job: <cronjob>-<minute>
        job = scheduled.group(1) if scheduled else workload_of(who)
        kind = "job" if scheduled else "workload"
        when = line_time(lines[-1])
        stopped = str(state.fact_dict("replica_applier_at").get(replica) or "")
        if stopped and when and when > stopped:
            return []  # written after the stop: not its cause
        return [
            Finding(
                "replica_written_by_client",
                f"The {kind} {job} (pod {who}) wrote {rows} into {table} on the replica {replica}"
                f"{' at ' + when if when else ''}, just before its SQL thread stopped: a write to a replica "
                "conflicts with the rows replication brings later.",
                Severity.CRITICAL,
                f"pod/{who}",
                clip(lines[-1], 200),
                84,
                f"Point {job} at the primary (the replica is for reads); make the replica read-only "
                "(super_read_only=ON).",
                at=iso(when),
            )
        ]
