"""A limit the container never set: the LimitRanger admission plugin filled it in from the namespace's
LimitRange defaults (``kubernetes.io/limit-ranger: LimitRanger plugin set: memory limit for container C``).

When such a container is OOMKilled, the cause is the namespace default, not the container's spec: the
LimitRanges of its namespace are listed (a lead) and the finding names the one that gave the default.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    field_value,
    parse_table,
    register_correlator,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity

_SET_BY = rx.compile(r"LimitRanger plugin set:([^\n]*)")
_OOM_LIMIT = rx.compile(r"container (\S+) was OOMKilled.*? at its memory limit of (\S+?);")


def _limitranges(state: AnalysisState, namespace: str) -> list[str] | None:
    """Names of the LimitRanges a read listing of ``namespace`` shows; None when none was read."""
    for out in state.outputs:
        params = out.params
        if str(params.get("kind", "")).lower() not in ("limitrange", "limitranges", "limits"):
            continue
        if params.get("namespace") != namespace or params.get("name") or not out.ok or out.no_data:
            continue
        table = parse_table(out.text)
        if table is not None and "NAME" in table.header:
            return [table.column(row, "NAME") for row in table.rows if row]
    return None


def _defaulted(state: AnalysisState, pod: str) -> str:
    """What LimitRanger set on pod ``pod`` (the annotation's text), from its describe; '' if nothing."""
    for out in state.outputs:
        if field_value(out.text, "Name") == pod and (match := _SET_BY.search(out.text)):
            return match.group(1)
    return ""


@register_correlator
def limitrange_default_oom(state: AnalysisState, findings: list[Finding]) -> list[Finding]:
    reported = state.fact_set("limitrange_oom_reported")
    pending = state.fact_dict("limitrange_oom")
    for finding in findings:
        match = _OOM_LIMIT.search(finding.summary)
        if finding.kind != "oom_killed" or not match or finding.subject.count("/") != 2:
            continue
        _, namespace, pod = finding.subject.split("/")
        if f"memory limit for container {match.group(1)}" in _defaulted(state, pod):
            pending[finding.subject] = (match.group(1), match.group(2))
            state.lead(ObjRef("limitrange", "*", namespace), "the LimitRange that set the memory limit", 85)
    out: list[Finding] = []
    for subject, (container, limit) in pending.items():
        _, namespace, pod = subject.split("/")
        names = _limitranges(state, namespace)
        if subject in reported or names is None:
            continue
        reported.add(subject)
        source = f"the LimitRange {names[0]}" if len(names) == 1 else "a LimitRange of the namespace"
        out.append(
            Finding(
                "limitrange_default_oom",
                f"Pod {pod}: container {container} is OOMKilled at a memory limit of {limit} it never set: "
                f"{source} default gave it (LimitRanger set the limit at admission), and the container "
                "needs more.",
                Severity.CRITICAL,
                subject,
                f"kubernetes.io/limit-ranger: memory limit for container {container}; LimitRanges: "
                f"{', '.join(names) or 'none'}",
                90,
                f"Set an explicit memory limit (and request) on container {container} that fits its use, or "
                f"raise the default of {source.removeprefix('the ')}.",
            )
        )
    return out
