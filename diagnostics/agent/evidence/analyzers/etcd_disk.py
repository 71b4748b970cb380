"""etcd on a slow disk: every write waits for its WAL fsync, leaders change, the API server's writes time out.

etcd persists each proposal to its write-ahead log with an fsync before it acknowledges it, and commits
batches to its backend (bbolt). Its own guidance: the 99th percentile of
``etcd_disk_wal_fsync_duration_seconds`` should stay under 10 ms and that of
``etcd_disk_backend_commit_duration_seconds`` under 25 ms. A member whose disk is slower (a busy or throttled
volume, a noisy neighbour, a saturated device: ``node_disk_io_time_seconds`` near 1 s per second) misses
heartbeats, so elections follow (``etcd_server_leader_changes_seen_total`` rising, proposals failing), and
every write through the API server (POST, PUT, PATCH, DELETE) waits or times out ("etcdserver: request
timed out", "context deadline exceeded") while reads served from its cache stay fast.

Read from Prometheus alone: the members' fsync and commit percentiles (a recording rule's ``:p99`` or a
``quantile`` label), the leader changes over a window, the nodes' disk busy time and the API server's
latency by verb.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, register
from diagnostics.agent.evidence.analyzers.metrics.samples import Sample, has_samples, parse_samples
from diagnostics.agent.findings import Finding, Severity

_FSYNC, _COMMIT = "etcd_disk_wal_fsync_duration_seconds", "etcd_disk_backend_commit_duration_seconds"
_LIMITS = {_FSYNC: (0.010, "WAL fsync"), _COMMIT: (0.025, "backend commit")}
_WINDOW = rx.compile(r"(?:increase|rate)[_(]?\D{0,3}(\d+[smhd])")
_WRITES = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
_READS = ("GET", "LIST", "WATCH")


def _ms(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.1f} ms"


def _member(sample: Sample) -> str:
    return sample.labels.get("pod") or sample.labels.get("instance") or sample.labels.get("member") or "?"


def _quantile(sample: Sample) -> bool:
    name = sample.name
    if name.endswith(("_bucket", "_sum", "_count")):
        return False
    return "quantile" in sample.labels or "p99" in name or "quantile" in name or name.endswith("_seconds")


@register
class EtcdDiskAnalyzer(Analyzer):
    name = "etcd_disk"

    def applies(self, out: ToolOutput) -> bool:
        return not out.is_log and "etcd_" in out.text and has_samples(out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("etcd_disk")
        if facts.get("reported"):
            return []
        samples = parse_samples(out.text)
        slow: dict[str, dict[str, float]] = {}
        healthy: dict[str, list[float]] = {}
        for sample in samples:
            for metric, (limit, _label) in _LIMITS.items():
                if sample.name.startswith(metric) and _quantile(sample):
                    if sample.value > limit:
                        slow.setdefault(_member(sample), {})[metric] = sample.value
                    else:
                        healthy.setdefault(metric, []).append(sample.value)
        if not slow:
            return []
        facts["reported"] = True
        return [_finding(slow, healthy, samples)]


def _finding(
    slow: dict[str, dict[str, float]], healthy: dict[str, list[float]], samples: list[Sample]
) -> Finding:
    parts = []
    for member, metrics in sorted(slow.items()):
        said = []
        for metric, value in metrics.items():
            limit, label = _LIMITS[metric]
            others = healthy.get(metric) or []
            peers = f"; the other members {_ms(min(others))}-{_ms(max(others))}" if others else ""
            said.append(f"its {label} p99 is {_ms(value)} (etcd needs under {_ms(limit)}{peers})")
        parts.append(f"The etcd member {member} has a slow disk: " + ", ".join(said))
    text = "; ".join(parts)
    nodes = [m.removeprefix("etcd-") for m in slow]
    busy = [
        s
        for s in samples
        if s.name.startswith("node_disk_io_time") and s.value >= 0.8 and _node_of(s) in nodes
    ]
    if busy:
        s = busy[0]
        device = f" {s.labels['device']}" if s.labels.get("device") else ""
        text += f"; its node {_node_of(s)}'s disk{device} is busy {s.value:.0%} of the time"
    changes = [s for s in samples if "leader_changes" in s.name and s.value >= 2]
    if changes:
        window = _WINDOW.search(changes[0].name)
        over = f" in the last {_spell(window.group(1))}" if window else ""
        text += f"; etcd changed leader {int(max(s.value for s in changes))} times{over}"
    failed = [s for s in samples if "proposals_failed" in s.name and s.value > 0]
    if failed:
        text += f" and {int(max(s.value for s in failed))} proposals failed"
    writes = [
        s for s in samples if "apiserver_request_duration" in s.name and s.labels.get("verb") in _WRITES
    ]
    reads = [s for s in samples if "apiserver_request_duration" in s.name and s.labels.get("verb") in _READS]
    if writes:
        slowest = max(writes, key=lambda s: s.value)
        verbs = ", ".join(sorted({s.labels["verb"] for s in writes if s.value >= 1}))
        text += (
            f". So the API server's writes ({verbs or slowest.labels['verb']}) are slow and time out "
            f"(p99 {_ms(slowest.value)})"
        )
        if reads and max(s.value for s in reads) < 1:
            text += f" while its reads stay fast (p99 {_ms(max(s.value for s in reads))})"
    return Finding(
        "etcd_slow_disk",
        text + ".",
        Severity.CRITICAL,
        f"etcd/{sorted(slow)[0]}",
        ", ".join(f"{m} {k}={v}" for m, ks in slow.items() for k, v in ks.items())[:200],
        93,
        "Move the etcd member's data to a faster, dedicated disk (or stop what saturates it), then check "
        "that its WAL fsync p99 is back under 10 ms.",
    )


def _node_of(sample: Sample) -> str:
    return (sample.labels.get("node") or sample.labels.get("instance") or "").split(":", 1)[0]


def _spell(window: str) -> str:
    units: dict[str, Any] = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
    number, unit = int(window[:-1]), window[-1]
    return units[unit][:-1] if number == 1 else f"{number} {units[unit]}"
