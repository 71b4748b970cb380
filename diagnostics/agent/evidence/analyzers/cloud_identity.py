"""A workload identity the cloud refuses, and an alert's pod that is gone.

Pods get cloud credentials by exchanging their ServiceAccount's projected token: AWS IRSA
(``eks.amazonaws.com/role-arn`` on the ServiceAccount; STS ``AssumeRoleWithWebIdentity``), GKE Workload
Identity (``iam.gke.io/gcp-service-account``), Azure Workload Identity
(``azure.workload.identity/client-id``).
The cloud side trusts ServiceAccounts by name: an IAM role's trust policy names
``system:serviceaccount:<namespace>:<name>``, a GCP binding its member, an Azure federated credential its
subject. A pod that runs as another ServiceAccount (renamed by a chart, a new one per release) presents a
token the cloud refuses: "Not authorized to perform sts:AssumeRoleWithWebIdentity" (AccessDenied,
WebIdentityErr), "Permission 'iam.serviceAccounts.getAccessToken' denied", AADSTS70021 "No matching
federated identity record". Restarting the pod changes nothing.

An alert's pod can be gone by the time it is read (a restart replaced it): NotFound for a generated pod
name is no answer; its workload (the name without its ReplicaSet hash and suffix) and that workload's
current pods are.
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    ToolOutput,
    clip,
    field_value,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.evidence.analyzers.once import OnceAnalyzer, wait_for_more
from diagnostics.agent.findings import Finding, ObjRef, Severity

_REFUSED = (
    ("AWS STS", rx.compile(r"(?i)not authorized to perform:? sts:AssumeRoleWithWebIdentity|WebIdentityErr")),
    ("GCP IAM", rx.compile(r"(?i)iam\.serviceAccounts\.getAccessToken'? denied")),
    ("Azure AD", rx.compile(r"AADSTS700(?:16|21|213)")),
)
_ROLE_KEYS = (
    "eks.amazonaws.com/role-arn",
    "iam.gke.io/gcp-service-account",
    "azure.workload.identity/client-id",
)
_POD_NAME = rx.compile(r"^(.+?)-[a-z0-9]{6,10}-[a-z0-9]{5}$")
_NOT_FOUND = rx.compile(r"(?i)\bnot ?found\b")


@register
class CloudIdentityAnalyzer(OnceAnalyzer):
    name = "cloud_identity"

    def gather(self, out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        self._gone_pod(out, state, namespace)
        if out.is_log:
            self._refusal(out, state, facts, namespace)
        else:
            self._objects(out, state, facts, namespace)

    def conclude(self, facts: dict[str, Any]) -> list[Finding]:
        if not facts.get("cloud"):
            return []
        if not (facts.get("sa") and facts.get("accounts")) and wait_for_more(facts, 10):
            return []  # the pod's ServiceAccount and its neighbours, read next
        return [_finding(facts)]

    @staticmethod
    def _gone_pod(out: ToolOutput, state: AnalysisState, namespace: str) -> None:
        named = out.params.get("name") if out.params.get("kind") == "pod" else ""
        pod = str(out.params.get("pod_name") or named or "")
        if not pod or not namespace or pod.lower() not in state.related:
            return
        if not _NOT_FOUND.search(out.text[:400]):
            return
        match = _POD_NAME.match(pod)
        if match is None:
            return
        workload = match.group(1)
        state.related.add(workload.lower())
        state.lead(ObjRef("pod", "*", namespace), f"pod {pod} is gone: the current pods of {workload}", 88)
        state.lead(ObjRef("deployment", workload, namespace), f"the workload of the gone pod {pod}", 86)

    @staticmethod
    def _refusal(out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        if facts.get("cloud"):
            return
        for cloud, pattern in _REFUSED:
            lines = [ln for ln in out.text.splitlines() if pattern.search(ln)]
            if lines:
                _src, subject, _where = log_subject(out, state)
                role = rx.search(r"arn:aws:iam::\d+:role/[\w+=,.@\-/]+", out.text)
                facts.update(
                    cloud=cloud,
                    line=lines[-1].strip(),
                    pod=str(out.params.get("pod_name") or ""),
                    subject=subject,
                    namespace=namespace,
                    role=role.group(0) if role else facts.get("role", ""),
                )
                if namespace:
                    state.lead(
                        ObjRef("serviceaccount", "*", namespace), "the identities the cloud trusts", 84
                    )
                    state.lead(ObjRef("pod", facts["pod"], namespace), "its ServiceAccount", 84)
                return

    @staticmethod
    def _objects(out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        text = out.text
        if (account := field_value(text, "Service Account")) and field_value(text, "Name"):
            facts.setdefault("pod_sa", {})[field_value(text, "Name")] = account
            facts.setdefault("restarted", {})[field_value(text, "Name")] = "restartedAt" in text
            if role := rx.search(r"AWS_ROLE_ARN:\s+(\S+)", text):
                facts["role"] = role.group(1)
            if namespace:
                state.lead(ObjRef("serviceaccount", account, namespace), "the cloud identity it maps to", 84)
        table = parse_table(text)
        if table is not None and str(out.params.get("kind", "")).lower() in ("serviceaccount", "sa"):
            facts["accounts"] = {r[0]: table.column(r, "AGE") for r in table.rows if r}
        manifest = manifest_of(text)
        if manifest is not None and manifest.get("kind") == "ServiceAccount":
            meta = manifest.get("metadata") or {}
            annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
            facts.setdefault("sa", {})[str(meta.get("name"))] = {
                "identity": next((str(annotations[k]) for k in _ROLE_KEYS if k in annotations), ""),
                "chart": str(labels.get("helm.sh/chart") or ""),
            }
        pod = str(facts.get("pod") or "")
        if pod and (facts.get("pod_sa") or {}).get(pod) and namespace:
            facts["account"] = facts["pod_sa"][pod]


def _finding(facts: dict[str, Any]) -> Finding:
    pod, account = str(facts["pod"]), str(facts.get("account") or "")
    if not account and facts.get("pod_sa"):
        account = next(iter(facts["pod_sa"].values()))
    sa = (facts.get("sa") or {}).get(account) or {}
    identity = sa.get("identity") or facts.get("role") or "its cloud identity"
    accounts: dict[str, str] = facts.get("accounts") or {}
    mine = _age(accounts.get(account, ""))
    older = [n for n in accounts if n != account and _kin(n, account) and _age(accounts[n]) > mine]
    chart = f", chart {sa['chart']}" if sa.get("chart") else ""
    role = identity.rsplit("/", 1)[-1]
    text = (
        f"Pod {pod} crashes: {facts['cloud']} refuses its workload identity: AssumeRoleWithWebIdentity is "
        f"denied (AccessDenied) for the IAM role {role} ({identity})"
        if facts["cloud"] == "AWS STS"
        else f"Pod {pod} crashes: {facts['cloud']} refuses its workload identity {identity}"
    )
    text += (
        f": the pods run as the ServiceAccount {account or '?'}, and the cloud side trusts ServiceAccounts "
        f"by name (system:serviceaccount:{facts['namespace']}:{account or '?'}), which its trust policy does "
        "not allow"
    )
    if older:
        text += (
            f". {account} is new ({accounts.get(account) or '?'} old{chart}): since the chart upgrade the "
            f"pods run as it instead of {older[0]} ({accounts[older[0]]} old), the ServiceAccount the role "
            "trusted"
        )
    if any((facts.get("restarted") or {}).values()):
        text += "; the rollout restart did not help (a restart keeps the same identity)"
    text += f". '{clip(str(facts['line']), 180)}'"
    return Finding(
        "workload_identity_refused",
        clip(text, 900),
        Severity.CRITICAL,
        str(facts["subject"]),
        clip(str(facts["line"])),
        92,
        f"Allow system:serviceaccount:{facts['namespace']}:{account} in the role's trust policy, or run "
        "the pods as the ServiceAccount it trusts.",
    )


def _kin(a: str, b: str) -> bool:
    """Two names for the same thing: one starts with the other, or they share a long prefix."""
    shared = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return bool(a and b) and (a.startswith(b) or b.startswith(a) or shared >= 8)


def _age(age: str) -> float:
    total = 0.0
    for number, unit in rx.findall(r"(\d+)([smhdy])", age or ""):
        total += int(number) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 31536000}[unit]
    return total
