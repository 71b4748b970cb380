"""Pending pods the cluster autoscaler tries to place but the cloud refuses to give nodes for: a quota.

The scheduler leaves a pod Pending ("Insufficient cpu"); the cluster autoscaler picks a node group and
asks the cloud to grow it (``TriggeredScaleUp``). When the cloud account's quota is used up (AWS
``VcpuLimitExceeded``, GCP ``QUOTA_EXCEEDED``, Azure ``QuotaExceeded`` / ``OperationNotAllowed``) no
instance starts: the autoscaler records ``FailedScaleUp`` on the pod, backs the group off
("Disabling scale-up for node group ... errorClass=OutOfResource") and the pods stay Pending whatever the
group's max size. Not a cluster fault: the quota must be raised (or the group's instance type changed).
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    parse_events,
    parse_table,
    register,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity

_QUOTA = rx.compile(
    r"(VcpuLimitExceeded|QUOTA_EXCEEDED|QuotaExceeded|OperationNotAllowed[^\n]{0,80}quota|"
    r"InstanceLimitExceeded|ResourceExhausted[^\n]{0,40}quota)",
    rx.IGNORECASE,
)
_LIMIT = rx.compile(
    r"(?:current )?(vCPU|CPUS|Cores|instance)[\w ']{0,40}?limit(?: of)?:? ?(\d+(?:\.\d+)?)|"
    r"Quota '(\w+)' exceeded\.\s*Limit: ([\d.]+)|Current Limit: (\d+)",
    rx.IGNORECASE,
)
_GROUP = rx.compile(r"\{([\w.-]+) \d+->\d+ \(max: \d+\)\}|node group ([\w.-]+)|Instance group ([\w.-]+)")
_INSUFFICIENT = rx.compile(r"Insufficient (\w[\w./-]*)")


def _quota_words(text: str) -> tuple[str, str, str]:
    """(error code, resource, limit) of a cloud quota refusal."""
    code = _QUOTA.search(text)
    limit = _LIMIT.search(text)
    resource, amount = "", ""
    if limit:
        groups = limit.groups()
        resource = next((g for g in (groups[0], groups[2]) if g), "")
        amount = next((g for g in (groups[1], groups[3], groups[4]) if g), "")
    word = code.group(1).split()[0] if code else ""
    return (
        word,
        ("vCPU" if resource.lower() in ("vcpu", "cpus", "cores") else resource),
        amount.removesuffix(".0"),
    )


@register
class ScaleUpQuotaAnalyzer(Analyzer):
    name = "scale_up_quota"

    def applies(self, out: ToolOutput) -> bool:
        return bool(_QUOTA.search(out.text)) or "Pending" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        if not _QUOTA.search(out.text):
            self._lead_pending(out, state)
            return []
        facts = state.fact_dict("scale_up_quota")
        groups = [g for m in _GROUP.finditer(out.text) for g in m.groups() if g]
        group = groups[0] if groups else str(facts.get("group") or "")
        events = parse_events(out.text)
        refused = next((e.message for e in events if _QUOTA.search(e.message)), "")
        line = refused or next((ln for ln in out.text.splitlines() if _QUOTA.search(ln)), "")
        code, resource, amount = _quota_words(line)
        if not code or facts.get("reported"):
            return []
        facts.update(group=group, reported=True)
        namespace = field_value(out.text, "Namespace") or str(out.params.get("namespace") or "")
        short = next((m.group(1) for e in events if (m := _INSUFFICIENT.search(e.message))), "")
        pods = f"the {namespace} pods" if namespace and namespace != "kube-system" else "the Pending pods"
        why = f" on insufficient {short}" if short else ""
        quota = f"{resource + ' ' if resource else ''}quota{' of ' + amount if amount else ''}"
        return [
            Finding(
                "scale_up_quota_exceeded",
                f"The cluster autoscaler cannot add nodes to node group {group or '(its node group)'}: "
                f"the cloud account's {quota} is used up ({code}), so {pods} stay Pending{why}.",
                Severity.CRITICAL,
                f"nodegroup/{group}" if group else "cluster-autoscaler",
                clip(line, 220),
                90,
                f"Raise the cloud account's {quota} (a quota request) or move the node group to an instance "
                "family with quota left; the autoscaler retries after its backoff.",
            )
        ]

    @staticmethod
    def _lead_pending(out: ToolOutput, state: AnalysisState) -> None:
        """A listing of Pending pods: one Pending pod's events say why (the scheduler, the autoscaler)."""
        namespace = str(out.params.get("namespace") or "")
        led = state.fact_set("pending_led")
        if not namespace or namespace in led or "STATUS" not in out.text:
            return
        table = parse_table(out.text)
        pending = [
            r[0]
            for r in (table.rows if table else [])
            if r and table and table.column(r, "STATUS") == "Pending"
        ]
        if pending:
            led.add(namespace)
            state.lead(ObjRef("pod", pending[0], namespace), "a Pending pod: its events say why", 72)
