"""A container whose binary was built for another CPU architecture than its node's.

The kernel refuses to execute a binary of another architecture with ENOEXEC: the runtime's
``exec /app/server: exec format error`` (runc: ``exec user process caused: exec format error``), exit code
255 or 1 at once, then CrashLoopBackOff. It happens when an image published for one platform only (no
manifest list, or one without the node's platform) lands on a node of another: an arm64 node pool
(Graviton, Ampere, Apple silicon) added to an amd64 cluster, or the reverse. The workload's pods on nodes of
the image's architecture run. Read from the log (the line), where the workload's pods run (a ``-o wide``
listing or a pod's describe), and each node's ``kubernetes.io/arch`` (a label, an ``ARCH`` column, a
node describe's ``Architecture``).
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
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_FORMAT_ERROR = rx.compile(r"exec format error")
_ARCH_LABEL = rx.compile(r"(?:kubernetes\.io/arch|beta\.kubernetes\.io/arch)=(\w+)")
_ARCH_FIELD = rx.compile(r"^\s*Architecture:\s*(\w+)", rx.MULTILINE)
_IMAGE = rx.compile(r"^\s+Image:\s+(\S+)", rx.MULTILINE)
_RUNNING = {"Running", "Completed"}
# Reads the finding waits for the nodes' architectures and the workload's pods.
_WAIT = 3


@register
class ImageArchAnalyzer(Analyzer):
    name = "image_architecture_mismatch"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("image_arch")
        if facts.get("line"):
            note_wait(facts, out)
        text = out.text
        arches: dict[str, str] = facts.setdefault("arches", {})
        placed: dict[str, tuple[str, str]] = facts.setdefault("placed", {})  # pod -> (node, status)
        if out.is_log:
            line = next((ln.strip() for ln in text.splitlines() if _FORMAT_ERROR.search(ln)), "")
            pod, namespace = str(out.params.get("pod_name") or ""), str(out.params.get("namespace") or "")
            if line and pod and not facts.get("line"):
                facts.update(line=line, pod=pod, namespace=namespace)
                start_wait(facts)
                state.lead(ObjRef("node", "*"), "the nodes' CPU architectures", 84)
                if namespace:
                    state.lead(ObjRef("pod", pod, namespace), "the node a binary cannot run on", 85)
                    state.lead(ObjRef("pod", "*", namespace), "the nodes the workload's pods run on", 84)
        elif looks_like_describe(text) or field_value(text, "Name"):
            name = field_value(text, "Name")
            arch = _ARCH_FIELD.search(text) or _ARCH_LABEL.search(text)
            is_node = field_value(text, "Roles") or "Kubelet Version" in text or "ProviderID" in text
            if arch and is_node:
                arches[name] = arch.group(1)
            node = field_value(text, "Node").split("/", 1)[0]
            if node and name:
                status = (
                    "Running" if field_value(text, "Status") == "Running" else field_value(text, "Status")
                )
                crashing = "CrashLoopBackOff" in text or _FORMAT_ERROR.search(text) is not None
                placed[name] = (node, "CrashLoopBackOff" if crashing else status)
                if image := _IMAGE.search(text):
                    facts.setdefault("images", {})[workload_of(name)] = image.group(1)
        elif (table := parse_table(text)) is not None:
            header = table.header
            for row in table.rows:
                if not row:
                    continue
                name = table.column(row, "NAME")
                if "ARCH" in header:
                    arches[name] = table.column(row, "ARCH")
                elif "LABELS" in header and (arch := _ARCH_LABEL.search(row[-1])):
                    arches[name] = arch.group(1)
                elif "NODE" in header and "STATUS" in header:
                    placed[name] = (table.column(row, "NODE"), table.column(row, "STATUS"))
                    facts["listed"] = True
        return self._finding(facts)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        if not facts.get("line") or facts.get("reported"):
            return []
        pod = str(facts["pod"])
        workload = workload_of(pod)
        arches: dict[str, str] = facts["arches"]
        placed: dict[str, tuple[str, str]] = facts["placed"]
        node = placed.get(pod, ("", ""))[0]
        arch = arches.get(node, "")
        if not (arch and facts.get("listed")) and still_waiting(facts, _WAIT):
            return []
        mine = {p: placed[p] for p in placed if workload_of(p) == workload}
        failing = sorted({n for p, (n, s) in mine.items() if s not in _RUNNING or p == pod})
        running = sorted({n for p, (n, s) in mine.items() if s == "Running" and n not in failing})
        fail_arches = sorted({arches[n] for n in failing if arches.get(n)})
        run_arches = sorted({arches[n] for n in running if arches.get(n)} - set(fail_arches))
        facts["reported"] = True
        image = facts.get("images", {}).get(workload, "")
        image_text = f"the image {image}" if image else "its image"
        if fail_arches and len(fail_arches) == 1:
            where = f"on the {fail_arches[0]} nodes ({', '.join(failing)})"
            build = f"{image_text} has no {fail_arches[0]} build (its binary is for another architecture)"
        else:
            where = f"on node {node}" if node else ""
            build = f"{image_text} holds a binary for another CPU architecture than the node's"
        others = f", while its pods on the {'/'.join(run_arches)} nodes run" if run_arches else ""
        return [
            Finding(
                "image_architecture_mismatch",
                f"The {workload} pods {where} crash at start with exec format error: {build}{others} "
                f"('{clip(str(facts['line']), 120)}').",
                Severity.CRITICAL,
                f"pod/{pod}",
                clip(str(facts["line"])),
                92,
                "Publish the image for every node architecture (a multi-arch manifest list: docker buildx "
                "--platform linux/amd64,linux/arm64), or keep the workload on nodes of its image's "
                "architecture (a nodeSelector or affinity on kubernetes.io/arch).",
            )
        ]
