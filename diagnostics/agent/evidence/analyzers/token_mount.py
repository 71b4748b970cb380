"""An in-cluster API client in a pod that has no service account token mounted.

Every in-cluster client (client-go's ``rest.InClusterConfig``, the Python client's
``load_incluster_config``, fabric8, the JavaScript client) reads the token the kubelet projects at
``/var/run/secrets/kubernetes.io/serviceaccount/token``. The kubelet mounts it unless
``automountServiceAccountToken: false`` is set on the pod's spec, or on its ServiceAccount and the pod does
not set it back to true (the pod's field wins). Hardening baselines (CIS 5.1.6) turn it off on service
accounts; a controller running under one then fails at start: client-go's
``open /var/run/secrets/kubernetes.io/serviceaccount/token: no such file or directory``, the Python
client's ``Service token file does not exist``.

Read from the log (the failing line), the pod's describe (its service account, whether a
``kube-api-access`` volume is mounted) and the manifests of the ServiceAccount and the pod or its workload.
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
    looks_like_describe,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import containers_of, workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_NO_TOKEN = rx.compile(
    r"serviceaccount/token:? \(?(?:no such file or directory|No such file)|"
    r"[Ss]ervice token file does not exists?|"
    r"unable to load in-cluster configuration[^\n]*token"
)
_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"
# Reads the finding waits for the ServiceAccount's manifest once the failing line is known.
_WAIT = 3


def _spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    if obj.get("kind") == "Pod":
        return spec
    template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    assert isinstance(template, dict)
    pod = template.get("spec")
    return pod if isinstance(pod, dict) else {}


@register
class TokenMountAnalyzer(Analyzer):
    name = "service_account_token_not_mounted"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("token_mount")
        if facts.get("line"):
            note_wait(facts, out)
        text = out.text
        namespace = str(out.params.get("namespace") or "")
        if out.is_log:
            lines = [line.strip() for line in text.splitlines() if _NO_TOKEN.search(line)]
            pod = str(out.params.get("pod_name") or "")
            if lines and pod and not facts.get("line"):
                facts.update(line=lines[-1], pod=pod, namespace=namespace)
                start_wait(facts)
                if namespace:
                    state.lead(
                        ObjRef("pod", pod, namespace), "the service account of a pod with no token", 86
                    )
                self._lead_to_account(state, facts)
        elif looks_like_describe(text) and field_value(text, "Service Account"):
            pod = field_value(text, "Name")
            facts.setdefault("accounts", {})[pod] = field_value(text, "Service Account")
            containers = containers_of(describe_tree(text), "Containers")
            facts.setdefault("containers", {})[pod] = [c.key for c in containers]
            facts.setdefault("mounted", {})[pod] = "serviceaccount from" in text
            facts.setdefault("namespaces", {})[pod] = field_value(text, "Namespace")
            self._lead_to_account(state, facts)
        elif (obj := manifest_of(text)) is not None:
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            assert isinstance(meta, dict)
            name = str(meta.get("name") or "")
            if obj.get("kind") == "ServiceAccount":
                setting = obj.get("automountServiceAccountToken")
                facts.setdefault("account_automount", {})[name] = (
                    "" if setting is None else str(setting).lower()
                )
            elif spec := _spec_of(obj):
                key = workload_of(name) if obj.get("kind") == "Pod" else name
                setting = spec.get("automountServiceAccountToken")
                facts.setdefault("pod_automount", {})[key] = "" if setting is None else str(setting).lower()
                account = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "")
                facts.setdefault("workload_accounts", {})[key] = account
                self._lead_to_account(state, facts)
        return self._finding(facts)

    @staticmethod
    def _account(facts: dict[str, Any]) -> str:
        pod = str(facts.get("pod") or "")
        return str(
            facts.get("accounts", {}).get(pod)
            or facts.get("workload_accounts", {}).get(workload_of(pod))
            or ""
        )

    def _lead_to_account(self, state: AnalysisState, facts: dict[str, Any]) -> None:
        account, namespace = self._account(facts), str(facts.get("namespace") or "")
        if facts.get("line") and account and namespace:
            state.lead(ObjRef("serviceaccount", account, namespace), "whether it mounts its token", 87)

    def _finding(self, facts: dict[str, Any]) -> list[Finding]:
        if not facts.get("line") or facts.get("reported"):
            return []
        pod = str(facts["pod"])
        account = self._account(facts)
        on_account = facts.get("account_automount", {}).get(account) if account else None
        on_pod = facts.get("pod_automount", {}).get(workload_of(pod))
        if on_account is None and on_pod != "false" and still_waiting(facts, _WAIT):
            return []
        facts["reported"] = True
        containers = facts.get("containers", {}).get(pod) or []
        who = f"The `{containers[0]}` container of {pod}" if len(containers) == 1 else f"Pod {pod}"
        if on_pod == "false":
            why = "the pod's spec sets automountServiceAccountToken: false"
        elif on_account == "false":
            override = " (the pod does not override it)" if on_pod == "" else ""
            why = f"the ServiceAccount {account} sets automountServiceAccountToken: false{override}"
        elif on_account is not None:
            why = f"the ServiceAccount {account} does not turn the token off, yet none is mounted"
        else:
            why = (
                f"the token file is absent (the ServiceAccount {account or 'of the pod'} was not read: "
                "whether it "
                "turns automountServiceAccountToken off is not known)"
            )
        return [
            Finding(
                "service_account_token_not_mounted",
                f"{who} exits at start because no service account token is mounted: {why}, so building its "
                f"in-cluster client fails ('{clip(str(facts['line']), 160)}').",
                Severity.CRITICAL,
                f"pod/{pod}",
                clip(str(facts["line"])),
                91,
                "Set automountServiceAccountToken: true in the pod template (the pod's field wins over its "
                f"ServiceAccount's), or mount a projected token volume at {_TOKEN_PATH.rsplit('/', 1)[0]}.",
            )
        ]
