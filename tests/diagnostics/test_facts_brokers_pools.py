"""Brokers whose own rules stop the flow (RabbitMQ resource alarms, Kafka's max.poll.interval.ms) and a
client connection pool smaller than the threads that share it (issue 39, round seven). Names, products'
wordings and numbers here appear in no case."""

from __future__ import annotations

import json

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext


def _prom(*series: tuple[str, dict[str, str], float]) -> ToolOutput:
    result = [{"metric": dict(labels, __name__=n), "value": [1, str(v)]} for n, labels, v in series]
    text = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
    return ToolOutput("execute_prometheus_instant_query", {"query": "x"}, text)


def _log(pod: str, text: str, namespace: str = "q") -> ToolOutput:
    return ToolOutput("fetch_pod_logs", {"pod_name": pod, "namespace": namespace}, text)


def _kinds(findings: list[Finding], kind: str) -> list[Finding]:
    return [f for f in findings if f.kind == kind]


def test_a_disk_alarm_still_set_blocks_publishers_and_a_cleared_memory_alarm_is_history():
    state = AnalysisState(AlertContext())
    log = (
        "2027-04-01 01:00:00.000000+00:00 [warning] <0.1.0> memory resource limit alarm "
        "set on node 'rabbit@mq-2'.\n"
        "2027-04-01 01:20:00.000000+00:00 [warning] <0.1.0> memory resource limit alarm "
        "cleared on node 'rabbit@mq-2'.\n"
        "2027-04-05 17:42:10.000000+00:00 [warning] <0.2.0> disk resource limit alarm "
        "set on node 'rabbit@mq-2'.\n"
    )
    (alarm,) = _kinds(analyze(_log("mq-2", log), state), "broker_resource_alarm")
    assert "RabbitMQ mq-2 has raised its disk alarm at 2027-04-05 17:42:10" in alarm.summary
    assert "the memory alarm of 2027-04-01 01:00:00 has cleared" in alarm.summary
    assert "blocks publishers" in alarm.summary
    assert any(lead.obj.name == "*" and lead.obj.namespace == "q" for lead in state.leads)
    client = (
        '{"t":"2027-04-05T17:43:00Z","msg":"connection.blocked received","reason":"low on disk"}\n'
        '{"t":"2027-04-05T17:43:30Z","msg":"publish to exchange billing timed out"}\n'
    )
    (blocked,) = _kinds(analyze(_log("invoicer-0", client), state), "broker_blocked_publisher")
    assert "invoicer-0 (low on disk)" in blocked.summary and "time out" in blocked.summary


def test_rabbit_metrics_alone_name_the_alarm_and_quiet_gauges_say_nothing():
    labels = {"pod": "broker-a", "namespace": "m"}
    (alarm,) = _kinds(
        analyze(
            _prom(
                ("rabbitmq_alarms_memory_used_watermark", labels, 1),
                ("rabbitmq_connections_blocked", labels, 7),
            ),
            AnalysisState(AlertContext()),
        ),
        "broker_resource_alarm",
    )
    assert (
        "broker-a has raised its memory alarm" in alarm.summary and "7 connections blocked" in alarm.summary
    )
    quiet = _prom(("rabbitmq_alarms_memory_used_watermark", labels, 0))
    assert _kinds(analyze(quiet, AnalysisState(AlertContext())), "broker_resource_alarm") == []


def test_a_consumer_slower_than_max_poll_interval_rebalances_in_a_loop():
    state = AnalysisState(AlertContext())
    analyze(
        _prom(
            ("kafka_consumergroup_lag", {"consumergroup": "geo-indexer", "partition": "0"}, 900),
            ("kafka_consumergroup_lag", {"consumergroup": "geo-indexer", "partition": "1"}, 100),
        ),
        state,
    )
    env = (
        "Name: geo\nNamespace: q\n    Environment:\n      MAX_POLL_INTERVAL_MS: 60000\n  "
        "    MAX_POLL_RECORDS: 200\n"
    )
    analyze(ToolOutput("kubectl_describe", {}, env), state)
    log = (
        "%4|1700000000.000|MAXPOLL|rdkafka#consumer-1| [thrd:main]: Application maximum "
        "poll interval (60000ms) "
        "exceeded by 4210ms (adjust max.poll.interval.ms for long-running message "
        "processing): leaving group\n"
        "2027-05-05T05:05:05Z indexed batch in 64210 ms group_id=geo-indexer\n"
        "2027-05-05T05:05:06Z rebalancing: partitions revoked\n"
    )
    (loop,) = _kinds(analyze(_log("geo-7f9-abcde", log), state), "kafka_poll_interval_exceeded")
    assert "The geo-indexer consumers take longer than max.poll.interval.ms (60000 ms)" in loop.summary
    assert "a poll of 200 records (the last took 64210 ms)" in loop.summary
    assert "the lag grows (1000 messages behind)" in loop.summary
    calm = "2027-05-05T05:05:05Z indexed batch in 1200 ms group_id=geo-indexer\n"
    assert (
        _kinds(
            analyze(_log("geo-7f9-abcde", calm), AnalysisState(AlertContext())),
            "kafka_poll_interval_exceeded",
        )
        == []
    )


def test_a_pool_smaller_than_the_threads_with_a_database_that_has_room():
    state = AnalysisState(AlertContext())
    env = (
        "Name: api\nNamespace: p\n    Environment:\n      GUNICORN_THREADS:  16\n      "
        "SQLALCHEMY_POOL_SIZE:  4\n"
    )
    analyze(ToolOutput("kubectl_describe", {}, env), state)
    analyze(
        _prom(
            ("mysql_global_status_threads_connected", {"instance": "db"}, 40),
            ("mysql_global_variables_max_connections", {"instance": "db"}, 500),
        ),
        state,
    )
    log = (
        "[2027-06-06 06:06:06 +0000] [8] [INFO] Booting worker with pid: 8 (Gunicorn 22.0)\n"
        "2027-06-06T06:07:00Z ERROR sqlalchemy.exc.TimeoutError: QueuePool limit of size "
        "4 overflow 0 reached, "
        "connection timed out, timeout 30.00\n"
    )
    (pool,) = _kinds(analyze(_log("api-5d-x1y2z", log), state), "connection_pool_exhausted")
    assert "Gunicorn runs 16 threads per worker (GUNICORN_THREADS)" in pool.summary
    assert "pool has 4 connections (SQLALCHEMY_POOL_SIZE)" in pool.summary
    assert (
        "sqlalchemy.exc.TimeoutError" in pool.summary
        and "MySQL has connections to spare (40 of 500" in pool.summary
    )


def test_no_pool_errors_no_finding():
    state = AnalysisState(AlertContext())
    env = "Name: api\nNamespace: p\n    Environment:\n      MAX_THREADS:  16\n      DB_POOL:  4\n"
    found = analyze(ToolOutput("kubectl_describe", {}, env), state)
    found += analyze(_log("api-1", "2027-06-06T06:07:00Z GET /health 200\n"), state)
    assert (
        _kinds(found, "connection_pool_exhausted") == [] and _kinds(found, "database_connections_spare") == []
    )
