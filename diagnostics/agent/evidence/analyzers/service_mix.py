"""A Service whose selector matches the pods of more than one workload.

A Service sends to every ready pod whose labels include its selector, whoever owns the pod. When a second
Deployment's pods carry the same labels (a canary or an old copy left running, a workload that reused an
app label), the Service balances over both: the share of requests the other workload's pods get is their
share of the endpoints, and when they fail, that share of all requests fails while the intended pods look
healthy. Read from the Service's selector (its describe) and the pods' labels (a listing with LABELS);
their logs say which group fails and what version each runs.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.findings import Finding, Severity

_FAILED = rx.compile(r"\b(?:ERROR|FATAL)\b[^\n]*?\b(5\d\d)\b[^\n]*", rx.IGNORECASE)
_OK = rx.compile(r"\b(?:GET|POST|PUT|PATCH|DELETE)\s+\S+\s+[23]\d\d\b")
_VERSION = rx.compile(r"\b(\d+\.\d+\.\d+(?:-[\w.]+)?)\b[^\n]*\bstart", rx.IGNORECASE)
_REPLICASET_POD = rx.compile(r"-[a-f0-9]{6,10}-[a-z0-9]{5}$")
_SHARES = {
    Fraction(1, 2): "half",
    Fraction(1, 3): "a third",
    Fraction(2, 3): "two thirds",
    Fraction(1, 4): "a quarter",
}


def _share(part: int, whole: int) -> str:
    fraction = Fraction(part, whole)
    return _SHARES.get(fraction, f"{part} of {whole}")


@register
class ServiceSelectorMixAnalyzer(Analyzer):
    name = "service_selector_mix"

    def applies(self, out: ToolOutput) -> bool:
        return "LABELS" in out.text or out.is_log

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        if out.is_log:
            self._log_facts(out, state)
            return []
        return self._mixes(state)

    @staticmethod
    def _log_facts(out: ToolOutput, state: AnalysisState) -> None:
        pod = str(out.params.get("pod_name") or "")
        if not pod:
            return
        lines = out.text.splitlines()
        failed = [ln for ln in lines if _FAILED.search(ln)]
        ok = [ln for ln in lines if _OK.search(ln)]
        if failed and not ok:
            state.fact_dict("pod_failing_requests")[pod] = failed[-1]
        if version := next((m.group(1) for ln in lines if (m := _VERSION.search(ln))), ""):
            state.fact_dict("pod_versions")[pod] = version

    @staticmethod
    def _mixes(state: AnalysisState) -> list[Finding]:
        labels = state.fact_dict("pod_labels")
        reported = state.fact_set("service_mix_reported")
        failing = state.fact_dict("pod_failing_requests")
        versions = state.fact_dict("pod_versions")
        findings: list[Finding] = []
        for service, selector in state.fact_dict("service_selectors").items():
            namespace, name = service.split("/", 1)
            if not selector or service in reported:
                continue
            groups: dict[str, list[str]] = defaultdict(list)
            for key, pod_labels in labels.items():
                ns, pod = key.split("/", 1)
                if ns == namespace and all(pod_labels.get(k) == v for k, v in selector.items()):
                    groups[workload_of(pod)].append(pod)
            if len(groups) < 2:
                continue
            total = sum(len(p) for p in groups.values())
            # The intended workload: the one named like the Service, else the largest.
            main = name if name in groups else max(groups, key=lambda g: len(groups[g]))
            for other, pods in sorted(groups.items()):
                if other == main:
                    continue
                reported.add(service)
                version = next((versions[p] for p in pods if p in versions), "")
                error = next((failing[p] for p in pods if p in failing), "")
                runs = f" ({version})" if version else ""
                share = _share(len(pods), total)
                if error:
                    code = _FAILED.search(error)
                    status = code.group(1) if code else "an error"
                    effect = (
                        f", and every request they get fails with {status} ('{clip(error, 140)}'): "
                        f"{share} of the requests"
                    )
                else:
                    effect = f": they get {share} of the requests"
                extra = sorted(
                    {k for p in groups[main] for k, v in labels.get(f"{namespace}/{p}", {}).items()}
                    - set(selector)
                    - {"pod-template-hash"}
                )
                owner = "Deployment" if all(_REPLICASET_POD.search(p) for p in pods) else "workload"
                only = ",".join(f"{k}={v}" for k, v in selector.items())
                not_on = f" (not on {', '.join(extra)})" if extra else ""
                findings.append(
                    Finding(
                        "service_selects_other_workload",
                        f"The Service {name} selects only {only}{not_on}, so it also sends traffic to the "
                        f"{len(pods)} pods of the leftover {owner} {other}{runs}{effect}.",
                        Severity.CRITICAL if error else Severity.WARNING,
                        f"service/{service}",
                        f"Selector: {only}; endpoints of {other}: {', '.join(pods[:4])}",
                        90 if error else 60,
                        f"Remove the leftover {other} (scale it to 0) or make the Service's selector "
                        f"specific to {main}{' (add ' + extra[0] + ')' if extra else ''}.",
                    )
                )
        return findings
