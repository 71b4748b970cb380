"""Status conditions of any object (a custom resource's included) and Ingress backends -> findings, from
Kubernetes' own semantics rather than per-kind rules.

A condition is ``type / status / reason / message``. A *positive* type (Ready, Available, Progressing,
ScalingActive, AbleToScale, Synced, Healthy, Issuing, Established...) is a problem when ``False``; a
*negative* one (ReplicaFailure, Failed, Degraded, Stalled, ...Pressure, NetworkUnavailable) when ``True``.
``Ready`` summarizes the others, so a more specific failing condition ranks above it: its message is the
cause. A *completion* type (Completed, Complete, Finished, Done) that is not yet True says work is not
finished, which is normal while the object reports progress (a ``Progressing`` condition True, or a phase
such as Progressing or InProgress); where the work stopped, another condition (Progressing False, Degraded,
Failed) says why and is the finding. Only a completion type False with neither is a problem
(``problems``). Both the table form (``Type Status Reason Message`` columns, as for an HPA) and the block
form of a custom resource's ``kubectl describe`` (``Type:``/``Status:``/``Reason:``/``Message:`` lines)
are read. Pods and workloads have their own analyzers (pods.py, workloads.py) and are left to them.

An Ingress backend is ``service:port`` with the endpoints behind it; ``<error: endpoints ... not found>``
means no Service port answers there, and the Service is followed to compare its ports.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    looks_like_describe,
    parse_table,
    register,
    register_correlator,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity

# Abnormal-true types (Kubernetes' API conventions allow both polarities): failures, pressure, a capped
# scale (an HPA's ScalingLimited), what a deletion still waits on (a namespace's ...Remaining), work still
# in progress (kstatus' Reconciling, as Flux reports it).
_NEGATIVE = rx.compile(
    r"Failure$|^Failed$|Degraded|Stalled|^Reconciling$|Pressure$|Unavailable$|^Error$|Limited$|Remaining$"
)
# Types that say a piece of work has finished: False only means "not yet".
_COMPLETION = rx.compile(r"^(?:Completed?|Finished|Done)$")
# A phase (status.phase, a describe's Phase:) that says the object is still working on its change.
_UNDER_WAY = rx.compile(
    r"^(?:Progressing|InProgress|In Progress|Pending|Running|Updating|Reconciling|Provisioning|Creating)$",
    rx.IGNORECASE,
)
_OWN_ANALYZERS = {"pod", "deployment", "statefulset", "daemonset", "replicaset", "job", "node", "cronjob"}
# Type Status [LastHeartbeatTime] [LastTransitionTime] Reason Message (describe prints times for some kinds)
_TIME = r"(?:\w{3}, \d{1,2} \w{3} \d{4} [\d:]+ [-+]\d{4}\s+)"
_TABLE_ROW = rx.compile(rf"^\s{{2,}}([A-Z]\w+)\s+(True|False|Unknown)\s+{_TIME}{{0,2}}(\w+)\s*(.*)$")
_BLOCK_KEY = rx.compile(r"^\s*(Type|Status|Reason|Message):\s*(.*)$")
_BACKEND = rx.compile(r"([a-z0-9][\w.-]*):(\d{1,5}|[a-z][\w-]*)\s+\((<error:[^)]*>|[^)]*)\)")
_SERVICE_PORT = rx.compile(r"^Port:\s+\S*\s+(\d+)/", rx.MULTILINE)


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""

    @property
    def failing(self) -> bool:
        negative = bool(_NEGATIVE.search(self.type))
        return self.status == ("True" if negative else "False")


def problems(conditions: list[Condition], phase: str = "") -> list[Condition]:
    """The failing ``conditions`` that are problems: a completion type not yet True is left out while the
    object reports progress (``Progressing`` True, or an under-way ``phase``) or while another condition of
    the object fails (that one says why the work stopped)."""
    failing = [c for c in conditions if c.failing]
    progressing = bool(_UNDER_WAY.match(phase.strip())) or any(
        c.type == "Progressing" and c.status == "True" for c in conditions
    )
    causes = [c for c in failing if not _COMPLETION.match(c.type)]
    return [c for c in failing if not _COMPLETION.match(c.type) or not (progressing or causes)]


def conditions_of(text: str) -> list[Condition]:
    """Every condition in a describe: the table rows, and the ``Type:``/``Status:`` blocks (a block ends
    where one of its keys comes again)."""
    found: list[Condition] = []
    section = text.split("Conditions:", 1)[1] if "Conditions:" in text else ""
    block: dict[str, str] = {}
    for line in section.splitlines():
        if line.strip().startswith("Events:"):
            break
        if row := _TABLE_ROW.match(line):
            found.append(Condition(row.group(1), row.group(2), row.group(3), row.group(4).strip()))
        elif key := _BLOCK_KEY.match(line):
            if key.group(1) in block:
                found.append(_block(block))
                block = {}
            block[key.group(1)] = key.group(2).strip()
    if block.get("Type") and block.get("Status"):
        found.append(_block(block))
    return [c for c in found if c.type and c.status in ("True", "False", "Unknown")]


def _block(block: dict[str, str]) -> Condition:
    return Condition(
        block.get("Type", ""), block.get("Status", ""), block.get("Reason", ""), block.get("Message", "")
    )


def _kind(out: ToolOutput) -> str:
    kind = field_value(out.text, "Kind") or str(
        out.params.get("kind") or out.params.get("resource_type") or ""
    )
    if not kind and rx.search(r"^Reference:\s", out.text, rx.MULTILINE) and "Min replicas:" in out.text:
        kind = "horizontalpodautoscaler"
    return kind.lower()


@register
class ConditionsAnalyzer(Analyzer):
    name = "k8s_conditions"

    def applies(self, out: ToolOutput) -> bool:
        # a cluster-scoped object's describe (a namespace's) has no Namespace: line
        describe = looks_like_describe(out.text) or (
            "describe" in out.tool and bool(field_value(out.text, "Name"))
        )
        return describe and "Conditions:" in out.text and _kind(out) not in _OWN_ANALYZERS

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        kind = _kind(out) or "object"
        obj = ObjRef(kind, field_value(out.text, "Name"), field_value(out.text, "Namespace"))
        findings = []
        for condition in problems(conditions_of(out.text), field_value(out.text, "Phase")):
            why = condition.message or condition.reason
            summary = (
                f"{kind.capitalize()} {obj.name}: condition {condition.type} is {condition.status}"
                f"{f' ({condition.reason})' if condition.reason else ''}: {clip(why, 220)}."
            )
            rank = 70 if condition.type == "Ready" else 78
            if detail := _detail(kind, obj, condition, out.text):
                summary, rank = detail, 82
            findings.append(
                Finding("condition_failing", summary, Severity.CRITICAL, obj.label, clip(why), rank)
            )
        return findings


_METRIC = rx.compile(r"^\s+(.+?):\s+(\S+(?: \([^)]*\))?) / (\S+)\s*$", rx.MULTILINE)
_REMAINING = rx.compile(r"remaining: (\S+?) (?:in|has) (\d+) resource instances")


def _detail(kind: str, obj: ObjRef, condition: Condition, text: str) -> str:
    """What a failing condition means for its kind, in the object's own numbers ("" when nothing more)."""
    if condition.type == "ScalingLimited" and condition.reason in ("TooManyReplicas", "TooFewReplicas"):
        top = condition.reason == "TooManyReplicas"
        bound = field_value(text, "Max replicas" if top else "Min replicas")
        metrics = "; ".join(
            f"{m.group(1)} at {m.group(2)} of its {m.group(3)} target" for m in _METRIC.finditer(text)
        )
        return (
            f"The HPA {obj.name} runs at its {'maximum' if top else 'minimum'} of {bound} replicas and "
            f"cannot scale {'out' if top else 'in'} further (ScalingLimited {condition.reason})"
            + (f" while {clip(metrics, 200)}" if metrics else "")
            + (": raise maxReplicas or make each pod do more." if top else ".")
        )
    if condition.type == "NamespaceFinalizersRemaining" and (found := _REMAINING.search(condition.message)):
        finalizer, count = found.group(1), found.group(2)
        group = finalizer.split("/", 1)[0]
        return (
            f"The namespace {obj.name} stays Terminating: its deletion waits on {count} {group} resources "
            f"that still carry the finalizer {finalizer}, which no controller removes "
            "(NamespaceFinalizersRemaining)."
        )
    return ""


@register
class IngressAnalyzer(Analyzer):
    name = "k8s_ingress"

    def applies(self, out: ToolOutput) -> bool:
        return looks_like_describe(out.text) and "Backends" in out.text and "Rules:" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        name, namespace = field_value(out.text, "Name"), field_value(out.text, "Namespace")
        findings = []
        for service, port, behind in _BACKEND.findall(out.text):
            if not behind.startswith("<error"):
                continue
            state.fact_dict("ingress_backends")[f"{namespace}/{service}"] = (name, port)
            state.lead(ObjRef("service", service, namespace), f"the backend of ingress {name}", 85)
            findings.append(
                Finding(
                    "ingress_backend_missing",
                    f"Ingress {name} routes to {service}:{port}, which has no endpoints "
                    f"({clip(behind, 120)}): Service {service} does not exist, or exposes no port {port} "
                    "with ready pods behind it, so requests fail.",
                    Severity.CRITICAL,
                    f"ingress/{namespace}/{name}",
                    clip(f"{service}:{port} {behind}"),
                    80,
                    f"Point the Ingress at a port Service {service} exposes, or expose {port} on it.",
                )
            )
        return findings


@register_correlator
def ingress_port_mismatch(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """The Service an Ingress backend names, read: the ports it exposes against the port asked for."""
    reported = state.fact_set("ingress_port_reported")
    out: list[Finding] = []
    for label, (ingress, port) in state.fact_dict("ingress_backends").items():
        if label in reported:
            continue
        namespace, service = label.split("/", 1)
        ports = _other_ports(state, service, port)
        if ports:
            reported.add(label)
            out.append(
                Finding(
                    "ingress_port_mismatch",
                    f"Ingress {ingress} sends traffic to port {port} of Service {service}, which only "
                    f"exposes port {', '.join(ports)}: no request through the Ingress reaches a pod.",
                    Severity.CRITICAL,
                    f"ingress/{namespace}/{ingress}",
                    f"backend {service}:{port}; Service ports {', '.join(ports)}",
                    90,
                    f"Set the Ingress backend's port to {ports[0]} (or add port {port} to the Service).",
                )
            )
    return out


@register_correlator
def ingress_service_missing(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """An Ingress backend without an Endpoints object, where the namespace's Service listing, read, has no
    Service of that name: the Service itself does not exist (every Service with a selector has one)."""
    reported = state.fact_set("ingress_port_reported")
    out: list[Finding] = []
    for label, (ingress, port) in state.fact_dict("ingress_backends").items():
        namespace, service = label.split("/", 1)
        listed = _listed_services(state, namespace)
        if label in reported or listed is None or service in listed:
            continue
        reported.add(label)
        others = f" (it has {', '.join(sorted(listed)[:5])})" if listed else " (it has none)"
        out.append(
            Finding(
                "ingress_service_missing",
                f"Ingress {ingress} sends traffic to Service {service} (port {port}), which does not exist "
                f"in namespace {namespace}{others}: every request through the Ingress fails.",
                Severity.CRITICAL,
                f"ingress/{namespace}/{ingress}",
                f"backend {service}:{port}; Services in {namespace}: {', '.join(sorted(listed)) or 'none'}",
                92,
                f"Point the Ingress backend at the Service that serves it, or create Service {service}.",
            )
        )
    return out


def _listed_services(state: AnalysisState, namespace: str) -> set[str] | None:
    """The Service names a read listing of ``namespace`` shows; None when no such listing was read."""
    for output in state.outputs:
        params = output.params
        if str(params.get("kind", "")).lower() not in ("service", "services", "svc"):
            continue
        if params.get("namespace") != namespace or params.get("name") or not output.ok or output.no_data:
            continue
        table = parse_table(output.text)
        if table is not None and "NAME" in table.header:
            return {table.column(row, "NAME") for row in table.rows if row}
    return None


def _other_ports(state: AnalysisState, service: str, port: str) -> list[str]:
    """The ports a read Service ``service`` exposes when ``port`` is not among them, else []."""
    for output in state.outputs:
        if field_value(output.text, "Name") != service or "Port:" not in output.text:
            continue
        ports = _SERVICE_PORT.findall(output.text)
        if ports and port not in ports:
            return list(ports)
    return []


@register_correlator
def dialed_port_mismatch(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    """A client refused at ``service:port`` while the Service, read, exposes other ports: the client's
    configured port is wrong (a Service answers only on the ports it declares)."""
    reported = state.fact_set("dialed_port_reported")
    out: list[Finding] = []
    for label, port in state.fact_dict("dialed_ports").items():
        if label in reported:
            continue
        namespace, service = label.split("/", 1)
        ports = _other_ports(state, service, port)
        if ports:
            reported.add(label)
            out.append(
                Finding(
                    "dialed_port_mismatch",
                    f"The client connects to {service}:{port}, but Service {service} listens on port "
                    f"{', '.join(ports)}: the connection is refused, the configured port is wrong.",
                    Severity.CRITICAL,
                    f"service/{namespace}/{service}",
                    f"dialled {service}:{port}; Service ports {', '.join(ports)}",
                    92,
                    f"Configure the client with port {ports[0]} (or expose {port} on Service {service}).",
                )
            )
    return out
