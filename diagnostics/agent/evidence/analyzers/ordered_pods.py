"""A StatefulSet that cannot reach its replicas because ordered pod management waits on an unready pod.

With ``podManagementPolicy: OrderedReady`` (the default) the StatefulSet controller creates pod N+1 only
once pods 0..N are Running and Ready, and removes them in the reverse order. A pod that never becomes
Ready (a readiness probe that keeps failing) therefore holds every higher ordinal back: the StatefulSet
stays below its replicas with nothing else failing, no event for the missing pods, no Pending pod. (With
``Parallel`` it does not wait.) Read from the StatefulSet's manifest (replicas, policy, status) or its
describe (``Replicas: N desired | M total``), the pod listing (which ordinals exist, which are Ready), the
waiting pod's describe (its readiness failures) and its log (the line that says why it is not ready).
"""

from __future__ import annotations

from typing import Any

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
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_REPLICAS = rx.compile(r"^Replicas:\s+(\d+) desired \| (\d+) total", rx.MULTILINE)
_PROBE = rx.compile(r"Readiness probe failed: ([^\n]+)")
_LEVEL = rx.compile(r"\b(?:WARN(?:ING)?|ERROR|FATAL|warn|error)\b")
_WHY = rx.compile(
    r"not ready|readiness|not joining|waiting for|cannot|can't|no \w+ (?:for|in)", rx.IGNORECASE
)
# Reads the finding waits for the waiting pod's describe and log once the gap is known.
_WAIT = 4


def _ordinal(name: str, sts: str) -> int | None:
    suffix = name[len(sts) + 1 :] if name.startswith(f"{sts}-") else ""
    return int(suffix) if suffix.isdigit() else None


def _part(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


@register
class OrderedPodsAnalyzer(Analyzer):
    name = "statefulset_ordered_wait"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("ordered_pods")
        if facts.get("sts"):
            note_wait(facts, out)
        text = out.text
        pods: dict[str, bool] = facts.setdefault("ready", {})
        namespace = str(out.params.get("namespace") or "")
        if out.is_log:
            pod = str(out.params.get("pod_name") or "")
            lines = [ln.strip() for ln in text.splitlines() if _LEVEL.search(ln)]
            why = [ln for ln in lines if _WHY.search(ln)]
            if pod and (why or lines):
                facts.setdefault("log", {})[pod] = (why or lines)[-1]
        elif (obj := manifest_of(text)) is not None and obj.get("kind") == "StatefulSet":
            meta, spec, status = (_part(obj, k) for k in ("metadata", "spec", "status"))
            assert isinstance(meta, dict) and isinstance(spec, dict) and isinstance(status, dict)
            facts.update(
                sts=str(meta.get("name") or ""),
                namespace=str(meta.get("namespace") or namespace),
                desired=int(spec.get("replicas") or 1),
                total=int(status.get("replicas") or 0),
                ready_count=int(status.get("readyReplicas") or 0),
                policy=str(spec.get("podManagementPolicy") or "OrderedReady"),
            )
            self._lead(state, facts)
        elif looks_like_describe(text) and (replicas := _REPLICAS.search(text)):
            if "StatefulSet" in text or field_value(text, "Update Strategy"):
                facts.setdefault("sts", field_value(text, "Name"))
                facts.setdefault("namespace", field_value(text, "Namespace"))
                facts.setdefault("desired", int(replicas.group(1)))
                facts.setdefault("total", int(replicas.group(2)))
                self._lead(state, facts)
        elif looks_like_describe(text) and field_value(text, "Controlled By").startswith("StatefulSet/"):
            pod = field_value(text, "Name")
            probe = _PROBE.findall(text)
            if probe:
                facts.setdefault("probe", {})[pod] = probe[-1].strip()
            pods[pod] = bool(rx.search(r"^\s+Ready:\s+True", text, rx.MULTILINE))
        elif (table := parse_table(text)) is not None and "READY" in table.header:
            for row in table.rows:
                ready = table.column(row, "READY").split("/")
                if len(ready) == 2 and ready[0].isdigit():
                    pods[table.column(row, "NAME")] = ready[0] == ready[1]
                    facts["listed"] = True
        return self._finding(facts)

    @staticmethod
    def _lead(state: AnalysisState, facts: dict[str, Any]) -> None:
        sts, namespace, total = facts.get("sts"), facts.get("namespace"), int(facts.get("total") or 0)
        if sts and namespace and total and total < int(facts.get("desired") or 0):
            state.lead(ObjRef("pod", f"{sts}-{total - 1}", namespace), "the pod a StatefulSet waits on", 86)
            state.lead(ObjRef("pod", "*", namespace), "which ordinals exist and are Ready", 84)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        sts, desired, total = (
            str(facts.get("sts") or ""),
            int(facts.get("desired") or 0),
            int(facts.get("total") or 0),
        )
        if not sts or facts.get("reported") or not 0 < total < desired or facts.get("policy") == "Parallel":
            return []
        waiting = f"{sts}-{total - 1}"
        pods: dict[str, bool] = facts.get("ready", {})
        known = (
            waiting in pods
            and waiting in facts.get("log", {})
            and facts.get("policy")
            and (facts.get("listed") or facts.get("ready_count") is not None)
        )
        if not known and still_waiting(facts, _WAIT):
            return []
        if pods.get(waiting, True):
            return []  # it is Ready (or was never seen): the controller is not waiting on it
        facts["reported"] = True
        ready = facts.get("ready_count")
        if ready is None:
            ready = sum(1 for name, ok in pods.items() if ok and _ordinal(name, sts) is not None)
        policy = (
            "with podManagementPolicy OrderedReady"
            if facts.get("policy")
            else "with ordered pod management (OrderedReady, the default; its manifest was not read)"
        )
        nxt = f"{sts}-{total}"
        why = []
        if probe := facts.get("probe", {}).get(waiting):
            answer = rx.search(r"statuscode: (\d+)", probe)
            why.append(
                f"its readiness probe answers {answer.group(1)}"
                if answer
                else f"its readiness probe fails ({clip(probe, 100)})"
            )
        if line := facts.get("log", {}).get(waiting):
            why.append(f"its log says '{clip(line, 160)}'")
        because = f": {'; '.join(why)}" if why else ""
        return [
            Finding(
                "statefulset_ordered_wait",
                f"The StatefulSet {sts} wants {desired} replicas but has {total} pods, {ready} ready: "
                f"{policy} "
                f"it creates {nxt} only after {waiting} is Ready, and {waiting} is not Ready{because}.",
                Severity.CRITICAL,
                f"statefulset/{facts.get('namespace')}/{sts}",
                clip(line or str(facts.get("probe", {}).get(waiting, ""))),
                88,
                f"Make {waiting} Ready (what its readiness reports), or set podManagementPolicy: "
                "Parallel if the "
                "pods need not start in order (a new StatefulSet: the field cannot be changed in place).",
            )
        ]
