"""The lab table: every lab fault injected into the real lab, with a real Prometheus in the loop.

For each fault, on a healthy lab with no alert pending: inject it; **detection** is the lab's alert rules
(``infra/prometheus/lab-rules.yml``) firing in Prometheus; the diagnosis (analyzers only, environment
``local`` + ``prometheus``) starts from the first alert that fired, exactly as Alertmanager would deliver
it (labels, annotations, generatorURL), or from a user's report when no alert fired. **Localization**: the
root cause names the fault's service. **Root cause**: the diagnosis states the fault's decisive facts
(``ROOT_CAUSE``). **Mitigation**: the one proposed action is the fault's kind of fix and, executed, brings
the lab back to healthy. Nothing here tells the agent which fault was injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote_plus

import httpx

from diagnostics.agent.request.subject import AlertContext, from_alertmanager, from_text
from diagnostics.agent.runner import MemoryRecorder, Outcome, investigate
from diagnostics.toolsets.base import ReadToolset, WriteToolset
from diagnostics.toolsets.local import LocalReadToolset, LocalWriteToolset
from diagnostics.toolsets.prometheus import PrometheusConfig, PrometheusReadToolset
from diagnostics.toolsets.registry import Environment
from lab.config import LabConfig
from lab.control import Lab
from lab.faults import get_fault

# The decisive facts of each fault that a diagnosis must state (lower case), as an operator would check.
ROOT_CAUSE: dict[str, tuple[str, ...]] = {
    "bad_config": ("request_timeout_s", "30s"),
    "dependency_down": ("store", "refused"),
    "memory_exhaustion": ("out of memory", "batch_size"),
    "cpu_hog": ("cpu",),
    "added_latency": ("latency", "cache_enabled"),
    "disk_full": ("no space left",),
    "bad_deploy": ("v2", "keyerror"),
    "queue_backlog": ("0 processes",),
}
USER_REPORT = "Users report errors from the shop; please investigate."


@dataclass
class LabRow:
    fault: str
    alert: str = ""  # "<alertname> <service>" of the alert the diagnosis started from; "" = none fired
    alerts: list[str] = field(default_factory=list)  # every alert that fired
    detect_s: float | None = None
    localized: bool = False
    root_cause: bool = False
    action: str = ""
    mitigated: bool = False
    diagnose_s: float = 0.0
    diagnosis: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class LabWithPrometheus(Environment):
    """The lab's own tools (read and write) and the prometheus tools on ``prometheus_url``."""

    name = "local+prometheus"

    def __init__(self, config: LabConfig, prometheus_url: str) -> None:
        super().__init__({})
        self._config = config
        self._prometheus = PrometheusConfig(url=prometheus_url, timeout_s=10)

    def read_toolsets(self) -> list[ReadToolset]:
        return [LocalReadToolset(self._config), PrometheusReadToolset(self._prometheus)]

    def write_toolsets(self) -> list[WriteToolset]:
        return [LocalWriteToolset(self._config)]


def active_alerts(prometheus_url: str, state: str = "firing") -> list[dict[str, Any]]:
    """The alerts of Prometheus' rules in ``state`` (or any, for ""), shaped like Alertmanager's: labels
    (with alertname), annotations, generatorURL (the rule's expression), startsAt; oldest first."""
    groups = httpx.get(f"{prometheus_url}/api/v1/rules", params={"type": "alert"}, timeout=10).json()
    found = []
    for group in groups["data"]["groups"]:
        for rule in group["rules"]:
            link = f"{prometheus_url}/graph?g0.expr={quote_plus(rule['query'])}&g0.tab=1"
            for alert in rule.get("alerts", []):
                if state and alert["state"] != state:
                    continue
                found.append(
                    {
                        "labels": alert["labels"],
                        "annotations": alert.get("annotations", {}),
                        "generatorURL": link,
                        "startsAt": alert.get("activeAt", ""),
                        "status": alert["state"],
                    }
                )
    critical_first = {"critical": 0, "warning": 1}
    found.sort(key=lambda a: (a["startsAt"], critical_first.get(a["labels"].get("severity", ""), 2)))
    return found


def _wait(check: Callable[[], Any], timeout_s: float, interval_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(interval_s)


def _name(alert: dict[str, Any]) -> str:
    labels = alert["labels"]
    return " ".join(v for v in (labels.get("alertname", ""), labels.get("service", "")) if v)


def measure_fault(
    lab: Lab, prometheus_url: str, fault_name: str, *, detect_timeout_s: float = 150.0
) -> LabRow:
    """One row: the lab healed and quiet, the fault injected, detected, diagnosed and mitigated."""
    fault = get_fault(fault_name)
    row = LabRow(fault=fault_name)
    lab.heal()
    _wait(lambda: not active_alerts(prometheus_url, state=""), timeout_s=180)
    fault.inject(lab)
    injected = time.monotonic()
    firing = _wait(lambda: active_alerts(prometheus_url), timeout_s=detect_timeout_s)
    context: AlertContext
    if firing:
        row.detect_s = round(time.monotonic() - injected, 1)
        row.alerts = [_name(a) for a in firing]
        row.alert = row.alerts[0]
        context = from_alertmanager(firing[0])
    else:
        context = from_text(USER_REPORT)
    environment = LabWithPrometheus(lab.config, prometheus_url)
    started = time.monotonic()
    outcome = investigate(alert=context, environment=environment, recorder=MemoryRecorder(), mode="analyzers")
    row.diagnose_s = round(time.monotonic() - started, 1)
    row.diagnosis = outcome.diagnosis
    _grade(row, outcome, fault.target, lab)
    return row


def _grade(row: LabRow, outcome: Outcome, target: str, lab: Lab) -> None:
    text = "\n".join(
        [outcome.diagnosis, outcome.root_cause, *(f"{f.summary} {f.evidence}" for f in outcome.findings)]
    ).lower()
    row.localized = target in outcome.root_cause.lower()
    row.root_cause = all(word in text for word in ROOT_CAUSE[row.fault])
    if not outcome.proposals:
        return
    proposal = outcome.proposals[0]
    row.action = f"{proposal['action']} {proposal['args']}"
    expected = get_fault(row.fault).remedy(lab.config).action
    writer = LocalWriteToolset(lab.config)
    result = writer.run(proposal["action"], proposal["args"])
    row.mitigated = proposal["action"] == expected and result.ok and writer.health("lab").healthy


def table(rows: list[LabRow]) -> str:
    """The README's markdown table."""

    def mark(ok: bool) -> str:
        return "yes" if ok else "no"

    lines = [
        "| fault | detected by (after) | localized | root cause | mitigation (proposed, executed) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        detected = f"{row.alert} ({row.detect_s:g} s)" if row.alert else "no alert (user report)"
        mitigation = f"{mark(row.mitigated)}: {row.action}" if row.action else "no: nothing proposed"
        lines.append(
            f"| {row.fault} | {detected} | {mark(row.localized)} | {mark(row.root_cause)} | {mitigation} |"
        )
    passed = sum(r.localized and r.root_cause and r.mitigated for r in rows)
    detected_count = sum(bool(r.alert) for r in rows)
    lines.append("")
    lines.append(
        f"detected by an alert: {detected_count}/{len(rows)}; localized, root cause and mitigated: "
        f"{passed}/{len(rows)}"
    )
    return "\n".join(lines)
