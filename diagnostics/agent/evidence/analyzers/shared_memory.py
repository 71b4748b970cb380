"""Out of shared memory, not out of disk: a container's ``/dev/shm`` is the runtime's small default.

"No space left on device" from a shared-memory call is about ``/dev/shm``, a tmpfs, not about any disk:
PostgreSQL's "could not resize shared memory segment "/PostgreSQL.N" to B bytes" (parallel query workers
exchange tuples through dynamic shared memory, ``dynamic_shared_memory_type = posix``), Chromium's and
PyTorch DataLoader's "Bus error" / shm errors, ``shm_open`` failures. In a container ``/dev/shm`` is a
tmpfs the runtime sizes at 64 MiB unless the pod mounts its own there: an ``emptyDir`` with
``medium: Memory`` (and a ``sizeLimit``) at ``mountPath: /dev/shm``. Growing the data volume changes
nothing; small queries or jobs work, the large ones (more parallel workers, bigger segments) fail.

Read from the log (the shared-memory refusal), the pod's manifest (``-o yaml``/``-o json``: its volumes and
their mounts) and the namespace's claims and events (a volume grown for nothing).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    ToolOutput,
    clip,
    parse_events,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.evidence.analyzers.once import OnceAnalyzer, wait_for_more
from diagnostics.agent.evidence.analyzers.shm import shm_line
from diagnostics.agent.findings import Finding, ObjRef, Severity

_POSTGRES = rx.compile(r"(?i)shared memory segment \"?/PostgreSQL\.|PostgreSQL")


@register
class SharedMemoryAnalyzer(OnceAnalyzer):
    name = "shared_memory"

    def gather(self, out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        if out.is_log and out.tool != "alert" and not facts.get("line"):
            lines = [ln for ln in out.text.splitlines() if "No space left on device" in ln and shm_line(ln)]
            if lines:
                _src, subject, _where = log_subject(out, state)
                pod = str(out.params.get("pod_name") or "")
                facts.update(line=lines[-1].strip(), count=len(lines), pod=pod, namespace=namespace)
                facts.update(subject=subject, postgres=bool(_POSTGRES.search(out.text)))
                if pod and namespace:
                    state.lead(ObjRef("pod", pod, namespace), "what is mounted at /dev/shm", 88)
                    state.lead(ObjRef("persistentvolumeclaim", "*", namespace), "its disk, for contrast", 60)
        elif not out.is_log:
            self._objects(out, facts, namespace)

    def conclude(self, facts: dict[str, Any]) -> list[Finding]:
        if not facts.get("line"):
            return []
        if "shm" not in facts and wait_for_more(facts, 10):  # the pod's manifest, read next
            return []
        return [_finding(facts)]

    @staticmethod
    def _objects(out: ToolOutput, facts: dict[str, Any], namespace: str) -> None:
        manifest = manifest_of(out.text)
        pod = str(facts.get("pod") or "")
        if manifest is not None and manifest.get("kind") == "Pod":
            meta, spec = manifest.get("metadata") or {}, manifest.get("spec") or {}
            if pod and meta.get("name") != pod:
                return
            volumes = {str(v.get("name")): v for v in spec.get("volumes") or [] if isinstance(v, dict)}
            mounts = [
                m
                for c in spec.get("containers") or []
                if isinstance(c, dict)
                for m in c.get("volumeMounts") or []
                if isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == "/dev/shm"
            ]
            shm = ""
            for mount in mounts:
                empty = (volumes.get(str(mount.get("name"))) or {}).get("emptyDir") or {}
                if str(empty.get("medium")) == "Memory":
                    shm = f"an emptyDir with medium Memory, sizeLimit {empty.get('sizeLimit') or 'none'}"
            facts["shm"] = shm
            facts["claims"] = [
                str((v.get("persistentVolumeClaim") or {}).get("claimName"))
                for v in volumes.values()
                if v.get("persistentVolumeClaim")
            ]
        table = parse_table(out.text)
        if table is not None and "CAPACITY" in table.header:
            facts["capacity"] = {r[0]: table.column(r, "CAPACITY") for r in table.rows if r}
        for event in parse_events(out.text):
            if event.reason in ("FileSystemResizeSuccessful", "VolumeResizeSuccessful", "Resizing"):
                facts["grown"] = (
                    f"{event.obj or 'its volume'} ({event.reason}{f', {event.age} ago' if event.age else ''})"
                )


def _finding(facts: dict[str, Any]) -> Finding:
    pod = f"Pod {facts['pod']}" if facts["pod"] else "The workload"
    who = (
        "PostgreSQL's parallel query workers' dynamic shared memory"
        if facts["postgres"]
        else "its shared memory"
    )
    if facts.get("shm"):
        shm = f"the pod mounts {facts['shm']} at /dev/shm: that limit is what runs out"
    else:
        shm = (
            "in the container /dev/shm is the runtime's small default (64Mi) because the pod mounts no "
            "emptyDir with medium Memory at /dev/shm"
        )
    claims = facts.get("claims") or []
    capacity = facts.get("capacity") or {}
    disk = ""
    if claims:
        sized = ", ".join(f"{c} {capacity[c]}" if c in capacity else c for c in claims)
        disk = f"; the disk (PVC {sized}) is not the cause"
        if facts.get("grown"):
            disk += f", so growing it ({facts['grown']}) did not help"
    large = " the large queries that use parallel workers" if facts["postgres"] else ""
    summary = (
        f"{pod} fails{large} with 'No space left on device' on shared memory, not on a disk: {who} lives "
        f"in /dev/shm, and {shm}{disk}. ({facts['count']} lines; '{clip(str(facts['line']), 180)}')"
    )
    return Finding(
        "shared_memory_exhausted",
        clip(summary, 900),
        Severity.CRITICAL,
        str(facts["subject"]),
        clip(str(facts["line"])),
        91,
        "Mount an emptyDir with medium: Memory (and a sizeLimit that fits the workload) at /dev/shm, "
        "counted in the container's memory limit.",
    )
