"""A refused connection followed to the dependency that refuses it, and that dependency's own fault.

``connection refused`` means the address answered with a reset: nothing listens there. Behind a
Kubernetes Service's ClusterIP that is a Service with no ready endpoint (kube-proxy rejects), so the
client's error is a symptom and the cause is why the Service's pods are not serving (crash-looping,
OOMKilled, not ready). A client usually logs the address it dials (an IP) only when it fails, and the
name it was configured with when it connects (``connected to orders-db.shop.svc:5432``): the name on the
same port is the dependency, ``<service>.<namespace>.svc`` by the cluster DNS's own scheme. Its pods
(``<service>-<ordinal>`` of a StatefulSet, ``<service>-<hash>-<id>`` of a Deployment) are led to, and
their worst current problem becomes the cause the client's error is chained to.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, register_correlator
from diagnostics.agent.findings import Finding, ObjRef, Severity
from diagnostics.agent.request.timewindow import iso, line_time

_TARGET = rx.compile(r" at (\S+):(\d+) ")
_NAMED = rx.compile(r"\b([a-z][-a-z0-9]*)((?:\.[a-z0-9][-a-z0-9]*)*):(\d{2,5})\b")
_IP = rx.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_POD_SUFFIX = r"-(?:\d+|(?:[a-z0-9]{5,10}-)?[a-z0-9]{4,5})"


def named_dependency(text: str, address: str, port: str) -> tuple[str, str]:
    """(service, namespace or "") a log names on ``port`` besides ``address`` (a DNS name); else ("", "")."""
    for line in text.splitlines():
        for name, rest, seen_port in _NAMED.findall(line):
            host = f"{name}{rest}"
            if seen_port != port or host == address or _IP.match(host) or host in ("localhost", "tcp"):
                continue
            labels = host.split(".")
            namespace = labels[1] if len(labels) > 2 and labels[2] == "svc" else ""
            return labels[0], namespace
    return "", ""


def _first_refused(text: str, address: str) -> str:
    for line in text.splitlines():
        if address in line and "refused" in line.lower() and (moment := line_time(line)) is not None:
            return iso(moment)
    return ""


def _note_refusals(state: AnalysisState, findings: list[Finding]) -> None:
    deps = state.fact_dict("refused_dependencies")
    for finding in findings:
        target = _TARGET.search(finding.summary)
        if finding.kind != "connection_failure" or "refused" not in finding.summary or target is None:
            continue
        address, port = target.group(1), target.group(2)
        namespace = finding.subject.split("/")[1] if finding.subject.count("/") == 2 else ""
        for out in state.outputs:
            if not out.is_log or address not in out.text:
                continue
            service, ns = named_dependency(out.text, address, port)
            if service and f"{ns or namespace}/{service}" not in deps:
                client = str(out.params.get("pod_name") or finding.subject.rsplit("/", 1)[-1])
                since = _first_refused(out.text, address)
                deps[f"{ns or namespace}/{service}"] = (client, f"{address}:{port}", since)


@register_correlator
def refused_dependency_down(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    _note_refusals(state, findings)
    deps = state.fact_dict("refused_dependencies")
    causes = state.fact_dict("dependency_causes")
    led = state.fact_set("dependency_pods_led")
    for key in deps:
        namespace, service = key.split("/", 1)
        pattern = rx.escape(service) + _POD_SUFFIX
        for row in state.inventory.of_kind("pod", namespace):
            if rx.fullmatch(pattern, row.name) and row.label not in led:
                led.add(row.label)
                state.lead(ObjRef("pod", row.name, namespace), f"the pods behind {service}", 88)
        for finding in findings:
            parts = finding.subject.split("/")
            if not finding.is_problem or len(parts) != 3 or parts[0] != "pod" or parts[1] != namespace:
                continue
            best = causes.get(key)
            if rx.fullmatch(pattern, parts[2]) and (best is None or finding.rank > best.rank):
                causes[key] = finding
    reported = state.fact_set("dependency_chain_reported")
    out: list[Finding] = []
    for key, cause in causes.items():
        if key in reported or cause.kind == "connection_failure":
            continue
        reported.add(key)
        client, address, since = deps[key]
        service, pod = key.split("/", 1)[1], cause.subject.rsplit("/", 1)[-1]
        out.append(
            Finding(
                "dependency_down",
                f"The current fault: the dependency {service} (pod {pod}) is down, so {client} gets "
                f"connection refused at {address}{f' since {since}' if since else ''}. Why {pod} is down: "
                f"{cause.summary}",
                Severity.CRITICAL,
                cause.subject,
                f"{client}: connection refused at {address}; {cause.evidence}",
                min(max(cause.rank, 85) + 6, 99),
                cause.fix or f"Fix what keeps {pod} from serving; {client} recovers when it serves again.",
                cause.remedy,
            )
        )
    return out
