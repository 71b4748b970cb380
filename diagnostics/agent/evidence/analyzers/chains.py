"""A symptom followed to the object behind it, from Kubernetes' own wiring (not from cases).

- DNS: a name server ``IP:53`` that does not answer (``log_causes``) is the cluster DNS, whose pods run in
  ``kube-system`` by Kubernetes' convention (the ``kube-dns`` Service, CoreDNS or kube-dns pods): an
  unhealthy DNS pod there is the first cause, and its own last error line says why.
- Aggregated APIs: a controller that cannot read an aggregated API (``... the server is currently unable
  to handle the request (get pods.metrics.k8s.io)``: the HPA's resource metrics) leads to the APIService
  that serves the group; ``kubectl get apiservice`` names its backing Service and whether it is Available
  (``False (MissingEndpoints)``); the backing Service's namespace is listed and its unhealthy pods read.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    register,
    register_correlator,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity

_ERROR_LINE = rx.compile(r"\b(?:fatal|panic|error|failed)\b", rx.IGNORECASE)
_AGGREGATED = rx.compile(r"unable to handle the request \(get ([\w-]+)\.([\w.-]+)\)")
_APISERVICE_ROW = rx.compile(
    r"^(v\w+\.([\w.-]+))\s+([\w-]+)/([\w.-]+)\s+(True|False)\b(?:\s*(\(\w+\)))?", rx.MULTILINE
)


def _bad_pods(state: AnalysisState) -> dict[str, str]:
    """``namespace/pod`` -> its bad status, from the pod findings so far."""
    return state.fact_dict("bad_pods")


def _last_error(state: AnalysisState, pod: str) -> str:
    for out in reversed(state.outputs):
        if out.is_log and out.params.get("pod_name") == pod:
            line = next((ln for ln in reversed(out.text.splitlines()) if _ERROR_LINE.search(ln)), "")
            if line:
                return line.strip()
    return ""


def _first_or_better(state: AnalysisState, chain: str, pod: str) -> bool:
    """Report a chain once, and once more when the pod's last error line has been read since."""
    reported = state.fact_dict("chains_reported")
    with_line = bool(_last_error(state, pod))
    if chain in reported and (reported[chain] or not with_line):
        return False
    reported[chain] = with_line
    return True


def _pods_line(state: AnalysisState, pods: list[str], namespace: str) -> str:
    statuses = sorted({_bad_pods(state)[f"{namespace}/{p}"] for p in pods})
    said = f"pod {pods[0]}" if len(pods) == 1 else "pods " + ", ".join(pods)
    line = _last_error(state, pods[0])
    return f"{said} in {namespace} {'is' if len(pods) == 1 else 'are'} {'/'.join(statuses)}" + (
        f"; its last error: '{clip(line, 160)}'" if line else ""
    )


@register
class ApiServiceAnalyzer(Analyzer):
    """``kubectl get apiservice``: an aggregated API that is not Available, and the Service behind it."""

    name = "apiservices"

    def applies(self, out: ToolOutput) -> bool:
        return "apiservice" in str(out.params.get("kind", "")).lower() or "AVAILABLE" in out.text[:300]

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        findings = []
        for match in _APISERVICE_ROW.finditer(out.text):
            name, group, namespace, service, available, why = match.groups(default="")
            if available != "False":
                continue
            state.fact_dict("unavailable_apis")[group] = (name, namespace, service, why.strip())
            state.lead(ObjRef("pod", "*", namespace), f"the pods behind APIService {name}", 74)
            findings.append(
                Finding(
                    "apiservice_unavailable",
                    f"APIService {name} (served by Service {namespace}/{service}) is not Available "
                    f"{why.strip()}: requests for {group} fail.",
                    Severity.CRITICAL,
                    f"apiservice/{name}",
                    clip(match.group(0)),
                    70,
                )
            )
        return findings


@register_correlator
def dependency_behind_symptom(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    bad = _bad_pods(state)
    for finding in findings:
        parts = finding.subject.split("/")
        if finding.kind in ("pod_status", "crash_loop") and len(parts) == 3 and parts[0] == "pod":
            status = rx.search(r" is (?:in )?(\w+)", finding.summary)
            bad.setdefault(f"{parts[1]}/{parts[2]}", status.group(1) if status else "unhealthy")
        if finding.kind == "dns_server_unanswered":
            state.facts.setdefault("dns_symptom", finding)
    latest = state.outputs[-1].text if state.outputs else ""
    match = _AGGREGATED.search(latest)
    symptom = next((f for f in findings if f.is_problem and "/" in f.subject), None)
    if match and symptom is not None:
        state.facts.setdefault("aggregated_symptom", (match.group(2), symptom))
        state.lead(ObjRef("apiservice", "*"), f"the APIService serving {match.group(2)}", 76)
    return _dns_chain(state) + _api_chain(state)


def _dns_chain(state: AnalysisState) -> list[Finding]:
    symptom = state.facts.get("dns_symptom")
    pods = sorted(key.split("/", 1)[1] for key in _bad_pods(state) if key.startswith("kube-system/"))
    pods = [p for p in pods if "dns" in p]
    if not isinstance(symptom, Finding) or not pods or not _first_or_better(state, "dns", pods[0]):
        return []
    server = rx.search(r"name server (\S+)", symptom.summary)
    return [
        Finding(
            "cluster_dns_down",
            f"The cluster DNS is down: {_pods_line(state, pods, 'kube-system')}. So the app's DNS lookups "
            f"to {server.group(1) if server else 'the cluster DNS'} time out and every call by name fails.",
            Severity.CRITICAL,
            ObjRef("pod", pods[0], "kube-system").label,
            symptom.evidence,
            88 + bool(_last_error(state, pods[0])),
            "Fix the cluster DNS pods (their last error says why), then the lookups recover.",
        )
    ]


def _api_chain(state: AnalysisState) -> list[Finding]:
    symptom = state.facts.get("aggregated_symptom")
    apis = state.fact_dict("unavailable_apis")
    if not isinstance(symptom, tuple):
        return []
    group, finding = symptom
    if group not in apis:
        return []
    name, namespace, service, why = apis[group]
    pods = sorted(k.split("/", 1)[1] for k in _bad_pods(state) if k.startswith(f"{namespace}/"))
    pods = [p for p in pods if p.startswith(service)] or pods
    if not pods or not _first_or_better(state, "api", pods[0]):
        return []
    return [
        Finding(
            "aggregated_api_down",
            f"{finding.subject.split('/', 1)[0].capitalize()} {finding.subject.rsplit('/', 1)[-1]} cannot "
            f"read {group}: the APIService {name} is unavailable {why}, because its backend "
            f"{service} is down: {_pods_line(state, pods, namespace)}.",
            Severity.CRITICAL,
            ObjRef("pod", pods[0], namespace).label,
            finding.evidence,
            88 + bool(_last_error(state, pods[0])),
            f"Fix {service} in {namespace} (its last error says why); the API becomes Available again.",
        )
    ]
