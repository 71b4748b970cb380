"""Gauges of the student's replicas, read from the database at each scrape (what the last adapter
health check wrote into ``Backend.replica_status``, training/adapter_health.py).

Series:
  skillgate_student_replica_up{backend, replica}                     1 when the last check reached it
  skillgate_student_adapter_status{backend, replica, adapter}        1 served, 0 admitted but missing
  skillgate_student_replica_failing_seconds{backend, replica}        how long it has been alarming (0: ok)
  skillgate_student_replica_checked_age_seconds{backend, replica}    since its last check
Every web process answers the same values: aggregate with ``max``, never ``sum``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from training.adapter_health import admitted, student_backends


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class StudentReplicaCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        labels = ["backend", "replica"]
        up = GaugeMetricFamily(
            "skillgate_student_replica_up", "1 when the last health check reached it.", labels=labels
        )
        status = GaugeMetricFamily(
            "skillgate_student_adapter_status",
            "1 when the replica serves the admitted adapter, 0 when it is missing there.",
            labels=[*labels, "adapter"],
        )
        failing = GaugeMetricFamily(
            "skillgate_student_replica_failing_seconds",
            "Seconds the replica has been down or missing an admitted adapter (0: healthy).",
            labels=labels,
        )
        age = GaugeMetricFamily(
            "skillgate_student_replica_checked_age_seconds",
            "Seconds since the replica was last checked.",
            labels=labels,
        )
        now = time.time()
        for backend in student_backends():
            known = backend.replica_status if isinstance(backend.replica_status, dict) else {}
            wanted = admitted(backend)
            for url, entry in known.items():
                if not isinstance(entry, dict):
                    continue
                label = [backend.name, url]
                up.add_metric(label, 1.0 if entry.get("up") else 0.0)
                served = set(entry.get("adapters") or [])
                for name in wanted:
                    status.add_metric([*label, name], 1.0 if name in served else 0.0)
                since = _number(entry.get("failing_since"))
                failing.add_metric(label, max(0.0, now - since) if since is not None else 0.0)
                checked = _number(entry.get("checked_at"))
                if checked is not None:
                    age.add_metric(label, max(0.0, now - checked))
        yield from (up, status, failing, age)
