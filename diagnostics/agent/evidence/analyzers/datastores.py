"""Datastores that refuse or stop work on their own side, from their semantics.

- Redis at ``maxmemory``: with ``maxmemory-policy noeviction`` (or a volatile-* policy and no key with a
  TTL) Redis evicts nothing and answers every write ``OOM command not allowed when used memory >
  'maxmemory'``; reads still work. Seen in redis_exporter's ``redis_memory_used_bytes`` against
  ``redis_memory_max_bytes``, in the server's configuration (``maxmemory-policy``) and in clients' errors.
- A PostgreSQL replication slot that no consumer reads (``pg_replication_slots_active`` 0) keeps every WAL
  segment from its ``restart_lsn`` on: checkpoints remove nothing, the volume fills. The slot's consumer
  left the server's log when it disconnected.
- A MySQL replica whose SQL (applier) thread stopped on an error (``Replica_SQL_Running: No``,
  ``Last_SQL_Errno``) while its IO thread still runs: relay logs grow, replication lag grows without end.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    register,
)
from diagnostics.agent.evidence.analyzers.metrics.results import size
from diagnostics.agent.evidence.analyzers.server_clients import want_clients
from diagnostics.agent.evidence.analyzers.server_states import (
    by_server,
    iso,
    last_time,
    lead_pod,
    line_time,
    pod_of,
    samples_of,
    size_redis,
    value,
)
from diagnostics.agent.findings import Finding, Severity

FULL = 0.95
RETAINED_MIN = 1 << 30  # WAL a slot holds back that matters (1 GiB)

_REDIS_OOM = rx.compile(r"OOM command not allowed[^\n]*maxmemory", rx.IGNORECASE)
_REDIS_POLICY = rx.compile(
    r"maxmemory[-_]policy\W{0,12}?\s*(noeviction|allkeys-\w+|volatile-\w+)", rx.IGNORECASE
)
_REDIS_MAX = rx.compile(r"(?:^|[\s\"'-])maxmemory\W{0,6}?\s*(\d+(?:\.\d+)?\s*(?:[kmgt]i?b?)?)\b", rx.I | rx.M)
_SLOT_LINE = rx.compile(r"\[(\d+)\][^\n]*slot \"([\w.-]+)\"")
_GONE = rx.compile(
    r"unexpected EOF|could not receive data from client|connection reset|terminating walsender", rx.IGNORECASE
)
_APPLIER_STOPPED = rx.compile(
    r"(?:Replica|Slave) SQL(?: thread)?(?: for channel '[^']*')?:[^\n]*?(Error_code: (?:MY-)?0*(\d+))", rx.I
)
_APPLIER_ERRORS = (
    rx.compile(r"(Duplicate entry [^;\n]*?)(?:, Error_code|;|$)", rx.I),
    rx.compile(r"(Can't find record in '[^']*')", rx.I),
    rx.compile(r"(Could not execute [^;\n]*)", rx.I),
)


def _redis_facts(state: AnalysisState) -> dict[str, object]:
    return state.fact_dict("redis_maxmemory")


@register
class RedisMaxmemoryAnalyzer(Analyzer):
    """Redis at maxmemory: its exporter's gauges, its configuration, its clients' OOM errors."""

    name = "datastore_redis_maxmemory"

    def applies(self, out: ToolOutput) -> bool:
        return "maxmemory" in out.text.lower() or "redis_memory_max_bytes" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        findings = self._metrics(out, state)
        if out.is_log and (hits := [ln for ln in out.text.splitlines() if _REDIS_OOM.search(ln)]):
            facts = _redis_facts(state)
            facts["refused"] = True
            policy = str(facts.get("policy") or "")
            why = f"with the {policy} policy" if policy else "evicting nothing"
            who = pod_of(out) or "a client"
            findings.append(
                Finding(
                    "redis_writes_refused",
                    f"Redis refuses the writes of {who}: it is full at its maxmemory, {why}, so writes fail "
                    f"with OOM command not allowed ({len(hits)} log lines; last: '{clip(hits[-1], 160)}').",
                    Severity.CRITICAL,
                    f"pod/{who}",
                    clip(hits[-1], 200),
                    86,
                    "Raise Redis' maxmemory (and the container's memory limit with it), give keys a TTL or "
                    "choose an eviction policy (allkeys-lru) where the data is a cache.",
                    at=iso(line_time(hits[-1])),
                )
            )
        elif not out.is_log and (policy := _REDIS_POLICY.search(out.text)):
            findings += self._config(out, state, policy.group(1).lower())
        return findings

    def _metrics(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        found: list[Finding] = []
        for (namespace, server), samples in by_server(samples_of(out, ("redis_",))).items():
            used = value(samples, "redis_memory_used_bytes")
            limit = value(samples, "redis_memory_max_bytes", "redis_config_maxmemory")
            facts = _redis_facts(state)
            if used is None or not limit or used / limit < FULL or facts.get("full") == server:
                continue
            evicted = value(samples, "redis_evicted_keys_total")
            facts.update(full=server, limit=size_redis(limit))
            policy = str(facts.get("policy") or "")
            lead_pod(state, namespace, server, "Redis at its maxmemory: its configuration")
            evicts = " and has evicted no key" if evicted == 0 else ""
            with_policy = f" with the {policy} policy" if policy else ""
            found.append(
                Finding(
                    "redis_maxmemory_full",
                    f"Redis {server} is full at its maxmemory of {size_redis(limit)}{with_policy} "
                    f"({size(used)} used{evicts}): it refuses writes (OOM command not allowed) until memory "
                    "is freed.",
                    Severity.CRITICAL,
                    f"pod/{server}",
                    f"redis_memory_used_bytes {used:.0f} / redis_memory_max_bytes {limit:.0f}",
                    88,
                    "Raise maxmemory, expire keys (TTL) or use an evicting maxmemory-policy for cache data.",
                )
            )
        return found

    def _config(self, out: ToolOutput, state: AnalysisState, policy: str) -> list[Finding]:
        facts = _redis_facts(state)
        facts["policy"] = policy
        maximum = _REDIS_MAX.search(out.text)
        limit = maximum.group(1).replace(" ", "").lower() if maximum else str(facts.get("limit") or "")
        if policy == "allkeys-lru" or not (facts.get("full") or facts.get("refused")):
            return []
        name = field_value(out.text, "Name") or str(facts.get("full") or "Redis")
        at = f" of {limit}" if limit else ""
        return [
            Finding(
                "redis_noeviction_policy",
                f"Redis {name} is full at its maxmemory{at} with the {policy} policy: it evicts no key, so "
                "writes fail with OOM command not allowed while reads still work.",
                Severity.CRITICAL,
                f"pod/{name}",
                f"maxmemory {limit} maxmemory-policy {policy}",
                90,
                f"Raise maxmemory on {name} (with its memory limit), expire keys, or choose allkeys-lru "
                "if it holds cache data.",
            )
        ]


@register
class ReplicationSlotAnalyzer(Analyzer):
    """PostgreSQL replication slots without a consumer that hold WAL back (postgres_exporter's gauges)."""

    name = "datastore_replication_slots"

    def applies(self, out: ToolOutput) -> bool:
        return "pg_replication_slots" in out.text or (out.is_log and 'slot "' in out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        gone = state.fact_dict("slot_consumer_gone")
        if out.is_log:
            self._consumers(out.text, gone)
        found: list[Finding] = []
        volumes = {
            (s.labels.get("namespace", ""), s.labels.get("persistentvolumeclaim", "")): s.value
            for s in samples_of(out, ("kubelet_volume_stats_",))
            if s.name == "kubelet_volume_stats_used_bytes"
        }
        slots: dict[tuple[str, str], dict[str, float]] = {}
        for sample in samples_of(out, ("pg_replication_slots",)):
            key = (
                sample.labels.get("slot_name", ""),
                sample.labels.get("pod") or sample.labels.get("instance", ""),
            )
            slots.setdefault(key, {})[sample.name] = sample.value
            slots[key]["_ns"] = 0.0
        for (slot, server), values in slots.items():
            retained = values.get("pg_replication_slots_pg_wal_lsn_diff", 0.0)
            if values.get("pg_replication_slots_active", 1.0) != 0 or retained < RETAINED_MIN:
                continue
            when = str(gone.get(slot, ""))
            since = f" (its consumer disconnected on {when})" if when else ""
            volume = next((pvc for (_, pvc) in volumes if pvc and server and pvc.endswith(server)), "")
            filling = f", filling the volume {volume}" if volume else ""
            found.append(
                Finding(
                    "replication_slot_inactive",
                    f"The replication slot {slot} on {server or 'the database'} "
                    f"is inactive{since} and retains "
                    f"{size(retained)} of WAL that PostgreSQL cannot remove{filling}.",
                    Severity.CRITICAL,
                    f"pod/{server}" if server else f"slot/{slot}",
                    f"pg_replication_slots_active 0, pg_replication_slots_pg_wal_lsn_diff {retained:.0f}",
                    89,
                    "Reconnect the slot's consumer, or drop the slot "
                    f"(SELECT pg_drop_replication_slot('{slot}')) "
                    "if it is no longer used; set max_slot_wal_keep_size to bound what a slot may retain.",
                )
            )
        return found

    @staticmethod
    def _consumers(text: str, gone: dict[str, object]) -> None:
        """slot -> when its walsender's last line (a disconnect) was written."""
        pids = {m.group(1): m.group(2) for m in _SLOT_LINE.finditer(text)}
        for pid, slot in pids.items():
            lines = [ln for ln in text.splitlines() if f"[{pid}]" in ln]
            if lines and _GONE.search(lines[-1]) and (moment := line_time(lines[-1])):
                gone[slot] = moment


@register
class ReplicaApplierAnalyzer(Analyzer):
    """A MySQL replica whose SQL thread stopped while its IO thread runs (exporter gauges and its log)."""

    name = "datastore_replica_applier"

    def applies(self, out: ToolOutput) -> bool:
        return "_sql_running" in out.text or (out.is_log and "SQL" in out.text and "Error_code" in out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        found: list[Finding] = []
        if out.is_log:
            line = next((ln for ln in reversed(out.text.splitlines()) if _APPLIER_STOPPED.search(ln)), "")
            stop = _APPLIER_STOPPED.search(line) if line else None
            if stop:
                errno = stop.group(2)
                details = [m.group(1).strip() for p in _APPLIER_ERRORS if (m := p.search(line))]
                what = f" ({'; '.join(details[:2])})" if details else ""
                moment = line_time(line)
                server = pod_of(out) or "the replica"
                state.fact_dict("replica_applier")[server] = errno
                state.fact_dict("replica_applier_at")[server] = moment
                want_clients(state, str(out.params.get("namespace") or ""), server)
                found.append(
                    Finding(
                        "replica_sql_thread_stopped",
                        f"The replica SQL thread of {server} stopped "
                        f"at {moment or 'an unknown time'} on error "
                        f"{errno}{what}: it applies nothing more, so replication lags while the IO thread "
                        "still runs.",
                        Severity.CRITICAL,
                        f"pod/{server}",
                        clip(line, 200),
                        90,
                        "Find what wrote to the replica (it should be read-only: super_read_only=ON), "
                        "repair the "
                        "conflicting row, then START REPLICA; or rebuild the replica from the source.",
                        at=iso(last_time(out.text)),
                    )
                )
        for (namespace, server), samples in by_server(samples_of(out, ("mysql_",))).items():
            sql = value(
                samples, "mysql_slave_status_slave_sql_running", "mysql_replica_status_replica_sql_running"
            )
            io = value(
                samples, "mysql_slave_status_slave_io_running", "mysql_replica_status_replica_io_running"
            )
            if sql != 0 or server in state.fact_dict("replica_applier"):
                continue
            errno = value(samples, "mysql_slave_status_last_sql_errno", "mysql_replica_status_last_sql_errno")
            error = f" on error {errno:.0f}" if errno else ""
            io_state = " while the IO thread still runs" if io == 1 else ""
            lead_pod(state, namespace, server, "replica SQL thread stopped: its log says why")
            want_clients(state, namespace, server)
            found.append(
                Finding(
                    "replica_sql_thread_stopped",
                    f"The replica SQL thread of {server} stopped{error}, so replication lags{io_state}.",
                    Severity.CRITICAL,
                    f"pod/{server}",
                    f"replica SQL running 0, IO running {io:.0f}"
                    if io is not None
                    else "replica SQL running 0",
                    87,
                    "Read Last_SQL_Error (SHOW REPLICA STATUS), repair the conflict, then START REPLICA.",
                )
            )
        return found
