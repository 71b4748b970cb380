"""Message brokers whose own rules stop the flow, from their semantics.

- RabbitMQ resource alarms: when a node's memory passes ``vm_memory_high_watermark`` (or its free disk
  falls under ``disk_free_limit``) the node raises an alarm and blocks every publishing connection
  (``connection.blocked``) until the alarm clears; consumers go on. The node logs "<resource> resource
  limit alarm set" and later "... cleared"; rabbitmq's Prometheus plugin exposes
  ``rabbitmq_alarms_memory_used_watermark`` / ``rabbitmq_alarms_free_disk_space_watermark``. An alarm set
  and then cleared is history.
- Kafka consumers: a consumer that does not call ``poll()`` again within ``max.poll.interval.ms`` is
  considered dead; it leaves the group, the group rebalances, and the offsets of the batch it was working
  on cannot be committed (``CommitFailedException``). When processing one poll's ``max.poll.records``
  takes longer than the interval every time, the group rebalances in a loop and the lag only grows.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.metrics.results import number
from diagnostics.agent.evidence.analyzers.server_clients import want_clients
from diagnostics.agent.evidence.analyzers.server_states import (
    by_server,
    iso,
    last_time,
    line_time,
    pod_of,
    samples_of,
    value,
)
from diagnostics.agent.findings import Finding, Severity

_ALARM = rx.compile(r"\b(memory|disk) resource limit alarm (set|cleared)", rx.IGNORECASE)
_WATERMARK = rx.compile(r"vm_memory_high_watermark set\. Memory used:\s*(\d+) allowed:\s*(\d+)", rx.I)
_BLOCKED = rx.compile(
    r"connection\W{0,3}blocked|blocked by (?:the )?broker|publishers? (?:are |is )?blocked", rx.I
)
_BLOCK_REASON = rx.compile(r"low on (memory|disk)", rx.IGNORECASE)
_TIMED_OUT = rx.compile(r"publish\w*[^\n]{0,40}?(?:timed? ?out|timeout)", rx.IGNORECASE)

_POLL_EXPIRED = rx.compile(
    r"poll timeout has expired|maximum poll interval \(\d+ ?ms\) exceeded|"
    r"max\.poll\.interval\.ms[^\n]{0,40}exceeded|"
    r"MAX_POLL_EXCEEDED",
    rx.IGNORECASE,
)
_COMMIT_FAILED = rx.compile(
    r"CommitFailedException|kicked out of the group|not part of an active group", rx.I
)
_REJOIN = rx.compile(r"\(Re-\)joining group|rebalanc\w*|Attempt to heartbeat failed", rx.IGNORECASE)
_INTERVAL = rx.compile(r"max[._]poll[._]interval[._]ms\W{1,4}(\d+)", rx.IGNORECASE)
_RECORDS = rx.compile(r"max[._]poll[._]records\W{1,4}(\d+)", rx.IGNORECASE)
_GROUP = rx.compile(r"(?:groupId|group\.id|group_id)\s*[=:]\s*\"?([\w.-]+)", rx.IGNORECASE)
_TOOK = rx.compile(r"\bin (\d{4,}) ?ms\b", rx.IGNORECASE)


@register
class RabbitAlarmAnalyzer(Analyzer):
    """RabbitMQ's memory/disk alarms from the node's log and metrics; blocked publishers in clients' logs."""

    name = "broker_rabbitmq_alarms"

    def applies(self, out: ToolOutput) -> bool:
        return "rabbitmq_alarms_" in out.text or (
            out.is_log and bool(_ALARM.search(out.text) or _BLOCKED.search(out.text))
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        alarms = state.fact_dict("broker_alarms")
        found = self._node_log(out, state) if out.is_log and _ALARM.search(out.text) else []
        if out.is_log and (blocked := [ln for ln in out.text.splitlines() if _BLOCKED.search(ln)]):
            reason = _BLOCK_REASON.search(" ".join(blocked))
            why = f" (low on {reason.group(1).lower()})" if reason else ""
            timeouts = [ln for ln in out.text.splitlines() if _TIMED_OUT.search(ln)]
            effect = f": its publishes time out ({len(timeouts)} times since)" if timeouts else ""
            who = pod_of(out) or "a client"
            last = timeouts[-1] if timeouts else blocked[-1]
            found.append(
                Finding(
                    "broker_blocked_publisher",
                    f"The broker blocked the connection of {who}{why}{effect}, "
                    f"so the publishes of {who} wait "
                    "until the broker's resource alarm clears.",
                    Severity.CRITICAL,
                    f"pod/{who}",
                    clip(last, 200),
                    80,
                    "Clear the broker's resource alarm (see the broker's memory/disk alarm finding).",
                    at=iso(line_time(last)),
                )
            )
        for (namespace, node), samples in by_server(samples_of(out, ("rabbitmq_",))).items():
            for resource, metric in (
                ("memory", "rabbitmq_alarms_memory_used_watermark"),
                ("disk", "rabbitmq_alarms_free_disk_space_watermark"),
            ):
                if value(samples, metric) != 1 or f"{node}/{resource}" in alarms:
                    continue
                alarms[f"{node}/{resource}"] = "set"
                want_clients(state, namespace, node)
                held = value(samples, "rabbitmq_connections_blocked")
                blocking = f" ({held:.0f} connections blocked)" if held else ""
                found.append(_alarm_finding(node, resource, "", blocking, 85))
        return found

    @staticmethod
    def _node_log(out: ToolOutput, state: AnalysisState) -> list[Finding]:
        node = pod_of(out) or "the broker"
        last: dict[str, tuple[str, str]] = {}
        first_set: dict[str, str] = {}
        for line in out.text.splitlines():
            if match := _ALARM.search(line):
                resource, action = match.group(1).lower(), match.group(2).lower()
                last[resource] = (action, line_time(line))
                if action == "set":
                    first_set[resource] = line_time(line)
        watermark = _WATERMARK.search(out.text)
        detail = (
            f" (vm_memory_high_watermark: {number(int(watermark.group(1)) / 2**20)}Mi used of "
            f"{number(int(watermark.group(2)) / 2**20)}Mi allowed)"
            if watermark
            else ""
        )
        cleared = [
            f"the {resource} alarm of {first_set.get(resource) or when} has cleared (at {when})"
            for resource, (action, when) in sorted(last.items())
            if action == "cleared"
        ]
        history = "; " + "; ".join(cleared) if cleared else ""
        found: list[Finding] = []
        alarms = state.fact_dict("broker_alarms")
        for resource, (action, when) in sorted(last.items()):
            if action != "set":
                continue
            alarms[f"{node}/{resource}"] = "set"
            want_clients(state, str(out.params.get("namespace") or ""), node)
            extra = (detail if resource == "memory" else "") + history
            found.append(_alarm_finding(node, resource, when, extra, 88, at=iso(last_time(out.text))))
        return found


def _alarm_finding(node: str, resource: str, since: str, extra: str, rank: int, at: str = "") -> Finding:
    when = f" at {since}" if since else ""
    return Finding(
        "broker_resource_alarm",
        f"RabbitMQ {node} has raised its {resource} alarm{when} and blocks publishers "
        f"until it clears{extra}: "
        "every publish waits and the publishers' calls time out.",
        Severity.CRITICAL,
        f"pod/{node}",
        f"{resource} resource limit alarm set",
        rank,
        "Free memory on the broker (drain the queues that grow, add consumers, raise the memory limit and "
        "vm_memory_high_watermark) or disk for a disk alarm; publishers resume when the alarm clears.",
        at=at,
    )


@register
class PollIntervalAnalyzer(Analyzer):
    """Kafka consumers that exceed max.poll.interval.ms: poll timeouts, failed commits, rebalances, lag."""

    name = "broker_kafka_poll_interval"

    def applies(self, out: ToolOutput) -> bool:
        return (
            "kafka_consumergroup_lag" in out.text
            or bool(_INTERVAL.search(out.text))
            or (out.is_log and bool(_POLL_EXPIRED.search(out.text)))
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        lags = state.fact_dict("kafka_lag")
        for sample in samples_of(out, ("kafka_consumergroup_lag",)):
            if sample.name == "kafka_consumergroup_lag" and (group := sample.labels.get("consumergroup")):
                lags[group] = lags.get(group, 0.0) + sample.value
        config = state.fact_dict("kafka_config")
        if not out.is_log:
            for key, pattern in (("interval", _INTERVAL), ("records", _RECORDS)):
                if match := pattern.search(out.text):
                    config[key] = match.group(1)
            return []
        lines = out.text.splitlines()
        expired = [ln for ln in lines if _POLL_EXPIRED.search(ln)]
        if not expired:
            return []
        interval = _INTERVAL.search(out.text)
        records = _RECORDS.search(out.text)
        interval_ms = interval.group(1) if interval else str(config.get("interval") or "")
        batch = records.group(1) if records else str(config.get("records") or "")
        group_match = _GROUP.search(out.text)
        group = group_match.group(1) if group_match else pod_of(out)
        took = [int(m.group(1)) for ln in lines if (m := _TOOK.search(ln))]
        slow = [t for t in took if interval_ms and t > int(interval_ms)]
        commits = sum(1 for ln in lines if _COMMIT_FAILED.search(ln))
        rejoins = sum(1 for ln in lines if _REJOIN.search(ln))
        limit = f" ({interval_ms} ms)" if interval_ms else ""
        poll = f" a poll of {batch} records" if batch else " one poll's records"
        takes = f" (the last took {slow[-1]} ms)" if slow else ""
        committed = " offsets are not committed (CommitFailedException) and" if commits else ""
        lag = lags.get(group)
        grows = f" the lag grows ({number(lag)} messages behind)" if lag else " the lag grows"
        return [
            Finding(
                "kafka_poll_interval_exceeded",
                f"The {group} consumers take longer than max.poll.interval.ms{limit} "
                f"to process{poll}{takes}, "
                f"so they are kicked out of the group and rebalance in a loop ({len(expired)} poll timeouts, "
                f"{rejoins} rejoins):{committed}{grows}.",
                Severity.CRITICAL,
                f"pod/{pod_of(out)}" if pod_of(out) else f"consumergroup/{group}",
                clip(expired[-1], 200),
                88,
                "Lower max.poll.records (or raise max.poll.interval.ms above the slowest batch), or make the "
                "processing of one record faster; commit after each smaller batch.",
                at=iso(line_time(expired[-1])),
            )
        ]
