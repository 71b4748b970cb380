"""Platform outputs: GitOps (Argo CD) apps, clustered services' status (partitions, nodes down),
process supervisors (and a stopped process that others cannot connect to), and alerts that are not
incidents (heartbeats)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from diagnostics import conf as diagnostics_conf
from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    json_payloads,
    register,
    register_correlator,
    service_of,
)
from diagnostics.agent.findings import Finding, ObjRef, Remedy, Severity

_APP_ROW = rx.compile(r"^(\S+)\s+(https?://\S+|in-cluster)\s+")


@register
class ArgoAppAnalyzer(Analyzer):
    """``argocd app list`` / ``argocd app get``: which app is the subject, and why it does not sync."""

    name = "gitops_argocd"

    def applies(self, out: ToolOutput) -> bool:
        return "Sync Status:" in out.text or ("SYNCPOLICY" in out.text and "CLUSTER" in out.text)

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        if "Sync Status:" not in out.text:
            for line in out.text.splitlines():
                match = _APP_ROW.match(line.strip())
                if match and state.is_related(match.group(1).rsplit("/", 1)[-1]):
                    state.lead(
                        ObjRef("application", match.group(1)), "Argo CD app named like the subject", 90
                    )
            return []
        name = field_value(out.text, "Name") or str(out.params.get("app_name") or "")
        sync = field_value(out.text, "Sync Status")
        health = field_value(out.text, "Health Status")
        phase = field_value(out.text, "Phase")
        message = field_value(out.text, "Message")
        for ns in rx.findall(
            r"^\s*(?:\S+\s+)?\w+\s+([a-z0-9][-a-z0-9]+)\s+\S+\s+(?:Synced|OutOfSync)", out.text, rx.M
        ):
            state.fact_set("namespaces").add(ns)
        findings: list[Finding] = []
        broken = [
            line.strip()
            for line in out.text.splitlines()
            if rx.search(r"\s(OutOfSync|SyncFailed)\s", line) and rx.search(r"\s(Missing|Degraded)\s", line)
        ]
        if phase in ("Failed", "Error") or broken:
            detail = f": {message}" if message else ""
            objects = f" (not applied: {'; '.join(clip(b, 120) for b in broken[:3])})" if broken else ""
            findings.append(
                Finding(
                    "sync_failed",
                    f"Argo CD app {name} is {sync or 'OutOfSync'} / {health or 'unknown health'}: the last "
                    "sync failed"
                    f"{detail}{objects}.",
                    Severity.CRITICAL,
                    f"application/{name}",
                    clip(message or "; ".join(broken)),
                    75,
                    "Fix the manifests in the app's source repository, then sync again.",
                    Remedy(("sync", "argocd_sync"), name, {}, f"sync {name} again after the fix"),
                )
            )
        elif health in ("Degraded", "Missing"):
            findings.append(
                Finding(
                    "app_unhealthy",
                    f"Argo CD app {name} is {health} ({sync}).",
                    Severity.WARNING,
                    f"application/{name}",
                    "",
                    50,
                )
            )
        return findings


def _walk(value: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        found.append(value)
        for child in value.values():
            found += _walk(child)
    elif isinstance(value, list):
        for child in value:
            found += _walk(child)
    return found


@register
class ClusterStatusAnalyzer(Analyzer):
    """JSON status of a clustered service (RabbitMQ, Elasticsearch, etcd...): partitions and nodes down."""

    name = "cluster_status"

    def applies(self, out: ToolOutput) -> bool:
        return "partition" in out.text.lower() or '"running"' in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        product = "RabbitMQ" if "rabbit" in (out.text + out.tool).lower() else "The cluster"
        findings: list[Finding] = []
        for payload in json_payloads(out.text):
            objects = _walk(payload)
            partitioned = any(o.get("network_partitions_detected") is True for o in objects)
            pairs = []
            for obj in objects:
                unreachable = obj.get("unreachable_nodes") or (
                    obj.get("partitions") if isinstance(obj.get("partitions"), list) else None
                )
                if (unreachable and obj.get("node")) or (unreachable and obj.get("name")):
                    pairs.append(
                        f"{obj.get('node') or obj.get('name')} cannot reach "
                        f"{', '.join(map(str, unreachable))}"
                    )
                    partitioned = True
            down = sorted(
                {
                    str(o.get("node") or o.get("name"))
                    for o in objects
                    if o.get("running") is False and (o.get("node") or o.get("name"))
                }
            )
            if partitioned:
                findings.append(
                    Finding(
                        "network_partition",
                        f"{product} is not healthy: there is a network partition between {product} nodes "
                        "(split brain)"
                        + (f": {'; '.join(pairs[:3])}" if pairs else "")
                        + (f"; not running: {', '.join(down)}" if down else "")
                        + ".",
                        Severity.CRITICAL,
                        f"cluster/{product.lower()}",
                        clip("; ".join(pairs) or "partitions detected"),
                        90,
                        "Restore connectivity between the nodes, then restart the minority side so it "
                        "rejoins.",
                        Remedy(
                            ("restart",),
                            down[0] if down else product.lower(),
                            {},
                            "restart the partitioned node",
                        ),
                    )
                )
            elif down:
                findings.append(
                    Finding(
                        "nodes_down",
                        f"{product} nodes are not running: {', '.join(down)}.",
                        Severity.CRITICAL,
                        f"cluster/{product.lower()}",
                        "",
                        75,
                    )
                )
            if findings:
                break
        return findings


_PROCESS = rx.compile(
    r"^(\S+)\s+(RUNNING|STARTING|BACKOFF|FATAL|EXITED|STOPPED|UNKNOWN)\b\s*(.*)$", rx.MULTILINE
)


@register
class ProcessStatusAnalyzer(Analyzer):
    """Process supervisor status lines (supervisord's ``name STATE detail``)."""

    name = "process_status"

    def applies(self, out: ToolOutput) -> bool:
        return _PROCESS.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        findings = []
        for name, status, detail in _PROCESS.findall(out.text):
            if status in ("RUNNING", "STARTING"):
                continue
            findings.append(
                Finding(
                    "process_down",
                    f"Process {name} is {status}"
                    + (f" ({clip(detail, 100)})" if detail.strip() else "")
                    + ": it is not running.",
                    Severity.CRITICAL,
                    f"process/{name}",
                    clip(detail),
                    # Above the error-rate spikes of its callers: those are its symptoms.
                    75,
                    f"Find why {name} stopped (its log), fix it, then start it again.",
                    Remedy(("restart", "start"), name, {}, f"restart {name}"),
                )
            )
        return findings


_REFUSED_AT = rx.compile(r" at (\S+:\d+) .*connection refused", rx.IGNORECASE)


@register_correlator
def stopped_dependency(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """Processes that are down while others' connections are refused, whichever output comes first: the
    stopped process is most likely the dependency they cannot reach (the cause, not one more symptom)."""
    refused = state.fact_dict("refused_connections")  # address -> the services whose logs say so
    stopped = state.fact_dict("stopped_processes")  # service -> what its supervisor says
    for finding in findings:
        address = _REFUSED_AT.search(finding.summary) if finding.kind == "connection_failure" else None
        if address:
            refused.setdefault(address.group(1), set()).add(service_of(finding.subject))
        elif finding.kind == "process_down":
            stopped.setdefault(service_of(finding.subject), finding.summary)
    reported = state.fact_set("stopped_dependencies")
    out = []
    for service, status in stopped.items():
        callers = sorted({c for sources in refused.values() for c in sources} - {service, ""})
        if not callers or service in reported:
            continue
        reported.add(service)
        addresses = ", ".join(sorted(a for a, sources in refused.items() if set(callers) & sources))
        out.append(
            Finding(
                "dependency_stopped",
                f"{service} is not running, and {', '.join(callers)} cannot connect to {addresses} "
                f"(connection refused): {service} is most likely the dependency they fail to reach "
                f"({clip(status, 120)}).",
                Severity.CRITICAL,
                f"process/{service}",
                clip(status),
                88,
                f"Find why {service} stopped (its log), fix it, then start it again.",
                Remedy(("restart", "start"), service, {}, f"restart {service}"),
            )
        )
    return out


_HEARTBEAT = rx.compile(
    r"always (?:be )?firing|always fire|is always active|alerting pipeline is functional|dead ?man'?s "
    r"?(?:switch|snitch)"
    r"|heartbeat alert",
    rx.IGNORECASE,
)


@register
class HeartbeatAlertAnalyzer(Analyzer):
    """Alerts that fire on purpose (Watchdog, DeadMansSwitch): not an incident."""

    name = "alert_heartbeat"

    def applies(self, out: ToolOutput) -> bool:
        return _HEARTBEAT.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        alert = state.alert.labels.get("alertname") or state.alert.title or "this"
        match = _HEARTBEAT.search(out.text)
        lines = out.text.splitlines()
        first = next((i for i, line in enumerate(lines) if _HEARTBEAT.search(line)), None)
        quoted_text = " ".join(lines[first : first + 3]) if first is not None else ""
        quoted = f" Its own description says: '{clip(quoted_text, 300)}'" if quoted_text else ""
        return [
            Finding(
                "heartbeat_alert",
                f"This is not an issue: `{alert}` is a heartbeat (dead man's switch) alert, a health check "
                "of the "
                "alerting pipeline that fires all the time by design, to prove that the whole path from "
                "Prometheus "
                "through Alertmanager to the receivers works. If it ever stops firing, the alerting system "
                "itself is "
                f"broken.{quoted}",
                Severity.INFO,
                f"alert/{alert}",
                clip(match.group(0) if match else ""),
                97,
                "No action is needed; make sure something (e.g. a dead man's snitch) alerts when it stops.",
            )
        ]


_HTTP_CHECK = rx.compile(
    r"^([\w.-]+):\s*(?:GET|HEAD)\s+(\S+)\s*->\s*(\d{3}|unreachable)\b(.*)$", rx.MULTILINE
)


@register
class HttpCheckAnalyzer(Analyzer):
    """Health endpoint checks (``api: GET /healthz -> 500 in 12 ms: ...``)."""

    name = "http_check"

    def applies(self, out: ToolOutput) -> bool:
        return _HTTP_CHECK.search(out.text) is not None

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        findings = []
        for name, path, status, rest in _HTTP_CHECK.findall(out.text):
            if status.isdigit() and int(status) < 500:
                continue
            what = "is unreachable" if status == "unreachable" else f"answers HTTP {status}"
            findings.append(
                Finding(
                    "health_check_failed",
                    f"{name} {what} on {path}"
                    + (f" ({clip(rest, 120).lstrip(': ')})" if rest.strip() else "")
                    + ".",
                    Severity.CRITICAL,
                    f"service/{name}",
                    clip(f"{path} -> {status}{rest}"),
                    50,
                    f"Find why {name} fails its health check (logs, dependencies).",
                    Remedy(("restart",), name.split("_")[0], {}, f"restart {name}"),
                )
            )
        return findings


@register
class DeployHistoryAnalyzer(Analyzer):
    """A recent deploy is the first suspect when a service broke: its rollback is the standard fix."""

    name = "deploy_history"

    def applies(self, out: ToolOutput) -> bool:
        return '"version"' in out.text and ('"previous"' in out.text or "release" in out.text.lower())

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        entries = []
        for line in out.text.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        if not entries:
            return []
        last = entries[-1]
        if (
            not isinstance(last, dict)
            or not last.get("previous")
            or "rollback" in str(last.get("by", "")).lower()
        ):
            return []
        recent_s = diagnostics_conf.get().analyzers.recent_deploy_s
        try:
            at = datetime.strptime(str(last.get("at")), "%Y-%m-%dT%H:%M:%S%z")
            age = (datetime.now(UTC) - at).total_seconds()
        except ValueError:
            age = 0.0
        if age > recent_s:
            return []
        service = str(out.params.get("service") or last.get("service") or "")
        return [
            Finding(
                "recent_deploy",
                f"{service or 'The service'} was deployed {age / 60:.0f} min ago: release "
                f"{last.get('version')} replaced "
                f"{last.get('previous')}; a failure that started since then points at this deploy.",
                Severity.WARNING,
                f"service/{service}",
                clip(json.dumps(last)),
                68,
                f"Roll {service} back to {last.get('previous')} if the failure started after this deploy.",
                Remedy(
                    ("rollback", "rollout_undo"),
                    service,
                    {},
                    f"roll {service} back to {last.get('previous')}",
                ),
            )
        ]
