"""A log-shipping sidecar killed for memory while its destination refuses what it sends.

A shipper (Fluent Bit, Fluentd, Vector, Promtail, an OpenTelemetry Collector) reads the application's
log and sends it on. When the destination answers 429 (Loki's "ingestion rate limit exceeded", an
HTTP 429 Too Many Requests) the shipper keeps the rejected chunks and retries them; with memory
buffers and no bound (Fluent Bit without ``Mem_Buf_Limit``, ``Retry_Limit False``) they grow until the
sidecar reaches its memory limit and is OOMKilled. What it held is lost with it: gaps in the logs,
while the application container itself never restarted. Read from the pod's describe (the sidecar's
last state, limit and restarts; the application's), the sidecar's log (the refusal, the retries), its
configuration (the buffer bounds) and the destination's metrics (samples discarded as rate limited).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    describe_tree,
    field_value,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import containers_of, workload_of
from diagnostics.agent.findings import Finding, ObjRef, Severity

_SHIPPER = rx.compile(
    r"fluent-?bit|fluentd|vector|promtail|otel|opentelemetry-collector|filebeat|\[output:\w+", rx.IGNORECASE
)
_REFUSED = rx.compile(
    r"(?:HTTP\s*status\s*[=:]?\s*|status(?:\s*code)?\s*[=:]\s*|\b)429\b|Too Many Requests|"
    r"ingestion rate limit exceeded|rate[_ ]limit(?:ed)?\b",
    rx.IGNORECASE,
)
_TENANT = rx.compile(
    r"rate limit exceeded for (?:user|tenant|org)\s+([\w.-]+)(?:\s*\(limit:\s*(\d+) bytes/sec\))?"
)
_DESTINATION = rx.compile(r"\[output:(\w+):", rx.IGNORECASE)
_RETRY = rx.compile(r"failed to flush chunk|retry in \d+|retrying|will retry", rx.IGNORECASE)
_DEBUG = rx.compile(
    r"^\s+(LOG_LEVEL|LOGLEVEL|LOG_LVL|RUST_LOG|DEBUG)\s*:\s+(debug|trace|true)\s*$", rx.MULTILINE
)
_DISCARDED = rx.compile(r'"reason":"rate_limited","tenant":"([\w.-]+)"\},"value":\[[\d.]+,"(\d+)"\]')
_KEY = "sidecar_buffering"


def _describe(text: str, facts: dict[str, Any]) -> str:
    """Records each container's restarts, last reason and memory limit; returns the pod's name."""
    tree = describe_tree(text)
    pod = field_value(text, "Name")
    containers = containers_of(tree, "Containers")
    if len(containers) < 2:
        return ""
    for c in containers:
        last = c.child("Last State")
        limits = c.child("Limits")
        facts.setdefault("containers", {})[(pod, c.key)] = (
            int(c.get("Restart Count") or 0) if (c.get("Restart Count") or "0").isdigit() else 0,
            last.get("Reason") if last else "",
            limits.get("memory") if limits else "",
            c.get("Image"),
        )
    if debug := _DEBUG.search(text):
        facts["debug"] = f"{debug.group(1)}={debug.group(2)}"
    return pod


def _config(text: str, facts: dict[str, Any]) -> None:
    """What a shipper's configuration says about its buffers (Fluent Bit's keys)."""
    if "[OUTPUT]" not in text and "[INPUT]" not in text:
        return
    notes = []
    if not rx.search(r"Mem_Buf_Limit", text, rx.IGNORECASE):
        notes.append("no Mem_Buf_Limit")
    if retry := rx.search(r"Retry_Limit\s+(False|no_limits|no_retries|\d+)", text, rx.IGNORECASE):
        notes.append(f"Retry_Limit {retry.group(1)}")
    if not rx.search(r"storage\.type\s+filesystem", text, rx.IGNORECASE):
        notes.append("memory buffers only")
    facts["config"] = ", ".join(notes)


@register
class SidecarBufferingAnalyzer(Analyzer):
    name = "sidecar_buffering_oom"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict(_KEY)
        text = out.text
        namespace = str(out.params.get("namespace") or "")
        if out.is_log:
            refused = [ln for ln in text.splitlines() if _REFUSED.search(ln)]
            if refused and (_SHIPPER.search(text[:2000]) or _RETRY.search(text)):
                tenant = _TENANT.search(text)
                destination = _DESTINATION.search(text)
                facts.update(
                    refused=refused[-1],
                    tenant=tenant.group(1) if tenant else "",
                    limit=tenant.group(2) if tenant and tenant.group(2) else "",
                    destination=destination.group(1) if destination else "",
                    retries=len(_RETRY.findall(text)),
                )
        elif "Containers:" in text and "Last State" in text:
            if pod := _describe(text, facts):
                for volume in rx.findall(r"ConfigMap[^\n]*\n\s+Name:\s+([\w.-]+)", text):
                    state.lead(ObjRef("configmap", volume, namespace), "the sidecar's configuration", 72)
                state.lead(ObjRef("pod", pod, namespace), "the sidecar's log", 74)
        elif (table := parse_table(text)) is not None and "READY" in table.header:
            for row in table.rows:
                ready, restarts = table.column(row, "READY"), table.column(row, "RESTARTS")
                full = "/" in ready and ready.split("/")[0] == ready.split("/")[1] != "1"
                if full and restarts.isdigit() and int(restarts) >= 3 and namespace:
                    state.lead(
                        ObjRef("pod", row[0], namespace), "a pod whose containers restart while ready", 66
                    )
                    break
        elif "rate_limited" in text:
            for tenant, count in _DISCARDED.findall(text):
                if int(count) > 0:
                    facts.setdefault("discarded", {})[tenant] = count
        else:
            _config(text, facts)
        return _findings(facts)


def _findings(facts: dict[str, Any]) -> list[Finding]:
    if facts.get("reported"):
        return _late_config(facts)
    if not facts.get("refused"):
        return []
    containers: dict[tuple[str, str], tuple[int, str, str, str]] = facts.get("containers") or {}
    oom = [
        (key, v)
        for key, v in containers.items()
        if v[1] == "OOMKilled"
        and v[0] >= 2
        and _SHIPPER.search(f"{key[1]} {v[3]}")  # a shipper, by name or image
    ]
    if not oom:
        return []
    facts["reported"] = True
    (pod, sidecar), (restarts, _, limit, _) = max(oom, key=lambda kv: kv[1][0])
    steady = [c for (p, c), v in containers.items() if p == pod and c != sidecar and v[0] == 0]
    workload = workload_of(pod)
    tenant = str(facts.get("tenant") or "")
    destination = str(facts.get("destination") or "its destination").capitalize()
    over = (
        f" because tenant {tenant} exceeds its ingestion rate limit"
        + (f" ({facts['limit']} bytes/sec)" if facts.get("limit") else "")
        if tenant
        else " (rate limited)"
    )
    discarded = (facts.get("discarded") or {}).get(tenant)
    dropped = f"; it discarded {discarded} samples of {tenant} as rate_limited" if discarded else ""
    config = f" ({facts['config']})" if facts.get("config") else ""
    debug = (
        f"; the {steady[0]} container runs with {facts['debug']}, debug logging turned on"
        if facts.get("debug") and steady
        else ""
    )
    found = [
        Finding(
            _KEY,
            f"The {sidecar} sidecar of the {workload} pods is OOMKilled at its {limit or 'memory'} memory "
            f"limit again and again ({restarts} restarts): {destination} answers 429{over}{dropped}, and "
            f"{sidecar} keeps the rejected chunks in memory to retry them{config}{debug} "
            f"('{clip(str(facts['refused']), 120)}').",
            Severity.CRITICAL,
            f"pod/{pod}",
            clip(str(facts["refused"])),
            90,
            f"Bound {sidecar}'s buffers (Mem_Buf_Limit, or filesystem storage with a size limit) and its "
            f"retries, lower the log volume (the log level), or raise the tenant's ingestion limit.",
        )
    ]
    if steady:
        found.append(
            Finding(
                f"{_KEY}_lost",
                f"The lines {sidecar} buffered in memory are lost at each of its restarts, hence the gaps in "
                f"the logs; the {', '.join(steady)} container itself never restarted (restart count 0).",
                Severity.WARNING,
                f"pod/{pod}",
                f"{sidecar}: OOMKilled, {restarts} restarts",
                70,
            )
        )
    facts.update(sidecar=sidecar, pod=pod, config_reported=bool(config))
    return found


def _late_config(facts: dict[str, Any]) -> list[Finding]:
    """The sidecar's buffer settings, when its configuration is read after the finding."""
    if not facts.get("config") or facts.get("config_reported"):
        return []
    facts["config_reported"] = True
    return [
        Finding(
            f"{_KEY}_config",
            f"{facts['sidecar']}'s configuration does not bound what it keeps to retry ({facts['config']}): "
            "the chunks the destination rejects stay in memory until the memory limit kills it.",
            Severity.WARNING,
            f"pod/{facts['pod']}",
            str(facts["config"]),
            72,
        )
    ]
