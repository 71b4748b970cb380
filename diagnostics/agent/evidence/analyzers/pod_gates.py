"""A pod whose containers are ready while the pod is not: a readiness gate (``spec.readinessGates``) whose
condition no controller has set, or has set False.

The kubelet marks a pod Ready only when every container is ready and every readiness gate's condition is
True; the gate's condition is written by a controller outside the pod (a load balancer controller's
target health, a service mesh). ``Ready False`` with reason ``ReadinessGatesNotReady`` while
``ContainersReady`` is True says the application is fine and that controller is what to read: its pods
are looked for among the system namespace's pods, by the words of the gate's condition type and the
word "controller", and read.
"""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    parse_table,
    register,
)
from diagnostics.agent.findings import Finding, ObjRef, Severity

SYSTEM_NAMESPACE = "kube-system"
_GATE_MESSAGE = rx.compile(
    r"corresponding condition of pod readiness gate \"([^\"]+)\" does not exist|"
    r"the status of pod readiness gate \"([^\"]+)\" is not \"True\"[^\n]*"
)
_GENERIC = frozenset({"k8s", "io", "com", "net", "org", "x", "kubernetes", "health", "status", "ready"})


def _gate_words(gate: str) -> set[str]:
    return {w for w in rx.split(r"[^a-z0-9]+", gate.lower()) if len(w) > 2 and w not in _GENERIC}


@register
class ReadinessGateAnalyzer(Analyzer):
    name = "readiness_gates"

    def applies(self, out: ToolOutput) -> bool:
        listing = str(out.params.get("kind") or "").lower() in ("pod", "pods") and "NAME" in out.text
        return bool(_GATE_MESSAGE.search(out.text)) or (
            listing and str(out.params.get("namespace") or "") == SYSTEM_NAMESPACE
        )

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        gates = state.fact_dict("readiness_gates")
        match = _GATE_MESSAGE.search(out.text)
        if match is None:
            self._controller_pods(out, state, gates)
            return []
        gate = match.group(1) or match.group(2)
        pod = str(out.params.get("name") or out.params.get("pod_name") or "")
        namespace = str(out.params.get("namespace") or "")
        containers_ready = bool(
            rx.search(r"type:\s*ContainersReady|ContainersReady\s+True", out.text)
        ) and not bool(rx.search(r"ContainersReady\s+False", out.text))
        gates[gate] = pod
        state.lead(
            ObjRef("pod", "*", SYSTEM_NAMESPACE), f"the controller that sets readiness gate {gate}", 74
        )
        missing = match.group(1) is not None
        return [
            Finding(
                "readiness_gate_not_ready",
                f"Pod {pod} is not Ready"
                + (" although its containers are ready" if containers_ready else "")
                + f": its readiness gate {gate} "
                + ("has no condition (no controller has set it)" if missing else "is not True")
                + ", so the pod never counts as available; the controller that sets the gate is the one "
                "to read, not the application.",
                Severity.CRITICAL,
                f"pod/{namespace}/{pod}" if namespace else pod,
                clip(match.group(0)),
                80,
                f"Find why the controller behind {gate} does not set it (its logs and permissions).",
            )
        ]

    @staticmethod
    def _controller_pods(out: ToolOutput, state: AnalysisState, gates: dict[str, str]) -> None:
        table = parse_table(out.text)
        if table is None or not gates:
            return
        words = set().union(*(_gate_words(g) for g in gates))
        for row in table.rows:
            name = row[0] if row else ""
            tokens = set(rx.split(r"[^a-z0-9]+", name.lower()))
            if "controller" in tokens and tokens & words:
                state.fact_set("gate_controllers").add(name)
                state.lead(
                    ObjRef("pod", name, SYSTEM_NAMESPACE),
                    "a controller that may set the readiness gate: its logs say why it does not",
                    76,
                )
