"""Datastores and brokers that refuse or stop work on their own side (issue 39, round seven), read from
their exporters' gauges, their own logs and their clients' logs. Names, products' wordings and numbers
here appear in no case."""

from __future__ import annotations

import json

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _vector(*series: tuple[str, dict[str, str], float]) -> str:
    result = [{"metric": dict(labels, __name__=n), "value": [1, str(v)]} for n, labels, v in series]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def _prom(text: str) -> ToolOutput:
    return ToolOutput("execute_prometheus_instant_query", {"query": "x"}, text)


def _log(pod: str, text: str, namespace: str = "ns1") -> ToolOutput:
    return ToolOutput("fetch_pod_logs", {"pod_name": pod, "namespace": namespace}, text)


def _kinds(findings: list[Finding], kind: str) -> list[Finding]:
    return [f for f in findings if f.kind == kind]


def _state() -> AnalysisState:
    return AnalysisState(AlertContext())


def test_redis_at_maxmemory_without_eviction_refuses_writes_from_metrics_config_and_clients():
    state = _state()
    labels = {"pod": "cache-7", "namespace": "shop"}
    full = analyze(
        _prom(
            _vector(
                ("redis_memory_used_bytes", labels, 536_800_000),
                ("redis_memory_max_bytes", labels, 536_870_912),
                ("redis_evicted_keys_total", labels, 0),
            )
        ),
        state,
    )
    (metric,) = _kinds(full, "redis_maxmemory_full")
    assert "Redis cache-7 is full at its maxmemory of 512mb" in metric.summary
    assert "has evicted no key" in metric.summary
    assert any(lead.obj.name == "cache-7" for lead in state.leads)
    config = (
        "Name:  cache-7\nNamespace:  shop\n    Command:\n      redis-server\n      --maxmemory 512mb\n"
        + ("      --maxmemory-policy volatile-lru\n")
    )
    (policy,) = _kinds(analyze(ToolOutput("kubectl_describe", {}, config), state), "redis_noeviction_policy")
    assert "with the volatile-lru policy" in policy.summary and "OOM command not allowed" in policy.summary
    java = (
        "2027-01-02T03:04:05Z WARN cart write failed 503 redis.clients.jedis.exceptions.JedisDataException: "
        "OOM command not allowed when used memory > 'maxmemory'.\n"
    )
    (client,) = _kinds(analyze(_log("cart-1", java), state), "redis_writes_refused")
    assert "cart-1" in client.summary and "volatile-lru" in client.summary and "503" in client.summary


def test_redis_with_room_or_an_evicting_policy_says_nothing():
    labels = {"pod": "cache-7"}
    roomy = _vector(("redis_memory_used_bytes", labels, 10), ("redis_memory_max_bytes", labels, 1000))
    assert _kinds(analyze(_prom(roomy), _state()), "redis_maxmemory_full") == []
    evicting = "Name: cache-7\nNamespace: a\n  maxmemory-policy allkeys-lru\n"
    assert (
        _kinds(analyze(ToolOutput("kubectl_describe", {}, evicting), _state()), "redis_noeviction_policy")
        == []
    )


def test_an_inactive_replication_slot_retains_wal_and_fills_the_volume():
    state = _state()
    log = (
        '2027-03-01 10:00:00.000 UTC [512] LOG:  starting logical decoding for slot "search_sync"\n'
        "2027-03-04 22:10:09.101 UTC [512] LOG:  could not receive data from client: "
        "Connection reset by peer\n"
        "2027-03-09 08:00:00.000 UTC [90] LOG:  checkpoint complete: wrote 10 buffers\n"
    )
    analyze(_log("orders-pg-1", log), state)
    labels = {"slot_name": "search_sync", "pod": "orders-pg-1"}
    metrics = _vector(
        ("pg_replication_slots_active", labels, 0),
        ("pg_replication_slots_pg_wal_lsn_diff", labels, 40 * 2**30),
        ("pg_replication_slots_active", {"slot_name": "standby", "pod": "orders-pg-1"}, 1),
        ("pg_replication_slots_pg_wal_lsn_diff", {"slot_name": "standby", "pod": "orders-pg-1"}, 90 * 2**30),
        ("kubelet_volume_stats_used_bytes", {"persistentvolumeclaim": "pgdata-orders-pg-1"}, 1),
    )
    (slot,) = _kinds(analyze(_prom(metrics), state), "replication_slot_inactive")
    assert "The replication slot search_sync on orders-pg-1 is inactive" in slot.summary
    assert "disconnected on 2027-03-04 22:10:09" in slot.summary and "40Gi of WAL" in slot.summary
    assert "filling the volume pgdata-orders-pg-1" in slot.summary


def test_a_replica_whose_sql_thread_stopped_and_the_client_that_wrote_to_it():
    state = _state()
    log = (
        "2027-02-02T09:15:00.000000Z 31 [ERROR] [MY-010584] [Repl] Replica SQL for channel 'east': Worker 2 "
        "failed executing transaction; Could not execute Delete_rows event on table shop.carts; Can't find "
        "record in 'carts', Error_code: 1032; handler error HA_ERR_KEY_NOT_FOUND\n"
    )
    (stopped,) = _kinds(analyze(_log("db-replica-2", log, "shop"), state), "replica_sql_thread_stopped")
    assert "stopped at 2027-02-02 09:15:00 on error 1032" in stopped.summary
    assert "Can't find record in 'carts'" in stopped.summary
    assert any(lead.obj.name == "*" and lead.obj.namespace == "shop" for lead in state.leads)
    pods = "NAME           READY   STATUS      RESTARTS   AGE\ndb-replica-2   1/1   Running   0   3d\n" + (
        "cleanup-28811220-abcde   0/1   Completed   0   2h\n"
    )
    analyze(ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "pod", "namespace": "shop"}, pods), state)
    assert any(lead.obj.name == "cleanup-28811220-abcde" for lead in state.leads)
    assert not any(lead.obj.name == "db-replica-2" and "client" in lead.reason for lead in state.leads)
    job = (
        "2027-02-02T09:14:10Z connected to db-replica-2.db:3306\n2027-02-02T09:14:11Z "
        "DELETE FROM shop.carts WHERE age > 30; 88 rows affected\n"
    )
    (wrote,) = _kinds(
        analyze(_log("cleanup-28811220-abcde", job, "shop"), state), "replica_written_by_client"
    )
    assert "job cleanup-28811220" in wrote.summary and "88 rows into shop.carts" in wrote.summary
    later = "2027-02-02T10:00:00Z DELETE FROM shop.carts; 3 rows affected via db-replica-2\n"
    assert (
        _kinds(analyze(_log("cleanup-28811221-fghij", later, "shop"), state), "replica_written_by_client")
        == []
    )


def test_replica_metrics_name_the_stopped_applier_and_running_threads_say_nothing():
    labels = {"pod": "mysql-b", "namespace": "x"}
    stopped = _vector(
        ("mysql_replica_status_replica_sql_running", labels, 0),
        ("mysql_replica_status_replica_io_running", labels, 1),
        ("mysql_replica_status_last_sql_errno", labels, 1146),
    )
    (finding,) = _kinds(analyze(_prom(stopped), _state()), "replica_sql_thread_stopped")
    assert "mysql-b stopped on error 1146" in finding.summary and "IO thread still runs" in finding.summary
    running = _vector(("mysql_slave_status_slave_sql_running", labels, 1))
    assert _kinds(analyze(_prom(running), _state()), "replica_sql_thread_stopped") == []
