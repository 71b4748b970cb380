"""A rollout stuck at ``ProgressDeadlineExceeded``, chained to why its new pods fail.

The Deployment controller sets ``Progressing=False, reason ProgressDeadlineExceeded`` when the new
ReplicaSet's pods have not become available within ``progressDeadlineSeconds``; the old ReplicaSet keeps
serving. The cause is what keeps the new pods (named after the new ReplicaSet) from becoming Ready: the
rollout finding quotes the highest-ranked problem found on one of them and ranks just above it.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, field_value, register_correlator
from diagnostics.agent.findings import Finding, Remedy, Severity

_NEW_RS = rx.compile(r"^NewReplicaSet:\s+(\S+)", rx.MULTILINE)


def _stuck_rollouts(state: AnalysisState) -> dict[str, tuple[str, str]]:
    """namespace/new-replicaset -> (deployment, namespace) for every read Deployment past its deadline."""
    stuck: dict[str, tuple[str, str]] = {}
    for out in state.outputs:
        if "ProgressDeadlineExceeded" not in out.text or not (new_rs := _NEW_RS.search(out.text)):
            continue
        name, namespace = field_value(out.text, "Name"), field_value(out.text, "Namespace")
        if name and new_rs.group(1) != "<none>":
            stuck[f"{namespace}/{new_rs.group(1)}"] = (name, namespace)
    return stuck


@register_correlator
def rollout_blocked_by_new_pods(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    causes = state.fact_dict("new_pod_causes")
    for finding in findings:
        if finding.is_problem and finding.subject.startswith("pod/") and finding.subject.count("/") == 2:
            _, namespace, pod = finding.subject.split("/")
            best = causes.get(f"{namespace}/{pod}")
            if best is None or finding.rank > best.rank:
                causes[f"{namespace}/{pod}"] = finding
    reported = state.fact_set("rollout_chain_reported")
    out: list[Finding] = []
    for rs_label, (deployment, namespace) in _stuck_rollouts(state).items():
        if rs_label in reported:
            continue
        pods = [f for pod, f in causes.items() if pod.startswith(f"{rs_label}-")]
        if not pods:
            continue
        cause = max(pods, key=lambda f: f.rank)
        reported.add(rs_label)
        new_rs = rs_label.split("/", 1)[1]
        out.append(
            Finding(
                "rollout_blocked",
                f"The rollout of Deployment {deployment} is stuck (ProgressDeadlineExceeded): the new pods "
                f"of ReplicaSet {new_rs} never become Ready. Why: "
                f"{cause.summary}",
                Severity.CRITICAL,
                f"deployment/{namespace}/{deployment}",
                f"Progressing False ProgressDeadlineExceeded; {cause.evidence}",
                min(cause.rank + 1, 99),
                cause.fix or f"Fix what keeps the new pods of {new_rs} from becoming Ready, or roll back.",
                Remedy(
                    ("rollback", "rollout_undo"), deployment, {}, "roll back to the last revision that worked"
                ),
            )
        )
    return out
