"""A process that runs as a user other than root and cannot write to a volume owned by root.

A volume's file system (a PersistentVolume's, a hostPath) keeps the owner and mode it was created with,
usually root and 0755. A pod whose ``securityContext`` runs its containers as another user (``runAsUser``,
``runAsNonRoot``, an image's non-root user) can read but not write there, unless the pod sets ``fsGroup``:
then the kubelet gives the volume's files to that group (``fsGroupChangePolicy``) at mount time. The write
fails with EACCES (errno 13): Python's ``PermissionError: [Errno 13] Permission denied: '/data/x'``, Node's
``EACCES: permission denied, mkdir '/data/x'``, Go's ``mkdir /data/x: permission denied``, coreutils'
``cannot create directory '/data/x': Permission denied``.

Read from the log (the path, the user when the log says it, the owner when it says it), the pod's
describe (which volume is mounted at or above the path, and what it is) and the pod's or its workload's
manifest (``runAsUser``, ``fsGroup``). An emptyDir is writable by everyone: no finding there.
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
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_DENIED = rx.compile(
    r"Permission denied:? ['\"`]?(/[^\s'\"`,]+)|"
    r"EACCES:? permission denied, \w+ ['\"`]?(/[^\s'\"`,]+)|"
    r"\b(?:mkdir|open|create|write|rename|chmod)\w* ['\"`]?(/[^\s'\"`,:]+)['\"`]?: permission denied|"
    r"cannot (?:create|touch|open)[\w ]* ['\"`]?(/[^\s'\"`,]+)['\"`]?: Permission denied",
    rx.IGNORECASE,
)
_RUNS_AS = rx.compile(r"\b(?:as|running as) uid[= ](\d+)|\buid=(\d+)\b[^\n]{0,20}\bgid=\d+[^\n]{0,40}start")
_OWNER = rx.compile(
    r"\b(?:owner|owned by)[:= ]+(?:uid[= ])?(\d+|root)(?:[ ,]+gid[= ]\d+)?(?:[ ,]+mode[= ](\d{3,4}))?"
)
_MOUNT = rx.compile(r"^\s+(/\S*) from (\S+) \((rw|ro)")
# Reads the finding waits for a manifest (the user, fsGroup) after the log and the mounts are known.
_WAIT = 3


def _security(spec: dict[str, Any]) -> dict[str, str]:
    """runAsUser, runAsNonRoot and fsGroup of a pod spec (a container's runAsUser wins over the pod's)."""
    pod_ctx = spec.get("securityContext") if isinstance(spec.get("securityContext"), dict) else {}
    assert isinstance(pod_ctx, dict)
    found = {
        "user": str(pod_ctx.get("runAsUser") if pod_ctx.get("runAsUser") is not None else ""),
        "non_root": "true" if pod_ctx.get("runAsNonRoot") else "",
        "fs_group": str(pod_ctx.get("fsGroup") if pod_ctx.get("fsGroup") is not None else ""),
    }
    for container in spec.get("containers") or []:
        ctx = container.get("securityContext") if isinstance(container, dict) else None
        if isinstance(ctx, dict) and ctx.get("runAsUser") is not None:
            found["user"] = str(ctx["runAsUser"])
    return found


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    if obj.get("kind") == "Pod":
        return spec
    template = spec.get("jobTemplate", {}).get("spec", spec) if obj.get("kind") == "CronJob" else spec
    pod = template.get("template", {}).get("spec") if isinstance(template.get("template"), dict) else None
    return pod if isinstance(pod, dict) else {}


def _volumes(spec: dict[str, Any]) -> dict[str, str]:
    """mount path -> 'claim NAME' / 'emptyDir' / 'hostPath PATH' / other volume type, from a pod spec."""
    sources: dict[str, str] = {}
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        kind = next((k for k in volume if k != "name"), "")
        value = volume.get(kind) if isinstance(volume.get(kind), dict) else {}
        assert isinstance(value, dict)
        detail = value.get("claimName") or value.get("path") or ""
        sources[str(volume.get("name"))] = f"{kind} {detail}".strip()
    mounts: dict[str, str] = {}
    for container in spec.get("containers") or []:
        for mount in (container.get("volumeMounts") or []) if isinstance(container, dict) else []:
            if isinstance(mount, dict) and mount.get("mountPath"):
                mounts[str(mount["mountPath"])] = sources.get(str(mount.get("name")), "")
    return mounts


def _describe_mounts(text: str) -> dict[str, str]:
    """mount path -> volume source, from a pod's describe (Mounts: lines, and the Volumes: section)."""
    tree = describe_tree(text)
    volumes = tree.child("Volumes")
    sources: dict[str, str] = {}
    for volume in volumes.children if volumes else []:
        kind = volume.get("Type").split(" ", 1)[0]
        detail = volume.get("ClaimName") or volume.get("Path") or ""
        sources[volume.key] = {"PersistentVolumeClaim": "persistentVolumeClaim"}.get(kind, kind) + (
            f" {detail}" if detail else ""
        )
    mounts: dict[str, str] = {}
    for line in text.splitlines():
        if match := _MOUNT.match(line):
            mounts.setdefault(match.group(1), sources.get(match.group(2), match.group(2)))
    return mounts


def _mount_of(path: str, mounts: dict[str, str]) -> tuple[str, str]:
    """The mount at or above ``path`` (the deepest), and its source."""
    best = ""
    for mount in mounts:
        if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
            best = mount
    return best, mounts.get(best, "")


@register
class VolumePermissionAnalyzer(Analyzer):
    name = "volume_permission_non_root"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("volume_permission")
        if facts.get("denied"):
            note_wait(facts, out)
        text = out.text
        if out.is_log:
            self._log(out, state, facts)
        elif looks_like_describe(text) and "Mounts:" in text:
            pod = field_value(text, "Name")
            facts.setdefault("mounts", {})[pod] = _describe_mounts(text)
            facts.setdefault("owners", {})[pod] = workload_of(pod, field_value(text, "Controlled By"))
            if "CrashLoopBackOff" in text:
                facts["crashing"] = True
        elif (obj := manifest_of(text)) is not None and (spec := _pod_spec(obj)):
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            assert isinstance(meta, dict)
            name = str(meta.get("name") or "")
            key = workload_of(name) if obj.get("kind") == "Pod" else name
            facts.setdefault("security", {})[key] = _security(spec)
            facts.setdefault("mounts", {}).setdefault(name, {}).update(_volumes(spec))
            facts.setdefault("owners", {}).setdefault(name, key)
        return self._finding(facts)

    @staticmethod
    def _log(out: ToolOutput, state: AnalysisState, facts: dict[str, Any]) -> None:
        lines = [line for line in out.text.splitlines() if _DENIED.search(line)]
        if not lines or facts.get("denied"):
            return
        match = _DENIED.search(lines[-1])
        path = next((g for g in match.groups() if g), "") if match else ""
        pod, namespace = str(out.params.get("pod_name") or ""), str(out.params.get("namespace") or "")
        if not path or not pod or path.startswith(("/proc/", "/sys/", "/dev/")):
            return
        facts.update(denied=path, line=lines[-1].strip(), pod=pod)
        start_wait(facts)
        if runs := _RUNS_AS.search(out.text):
            facts["log_user"] = next(g for g in runs.groups() if g)
        if owner := _OWNER.search(out.text):
            facts["owner"], facts["mode"] = owner.group(1), owner.group(2) or ""
        workload = workload_of(pod)
        facts.setdefault("owners", {}).setdefault(pod, workload)
        if namespace:
            state.lead(ObjRef("pod", pod, namespace), "the volumes mounted where a write is denied", 86)
            state.lead(ObjRef("deployment", workload, namespace), "the user the pod runs as (fsGroup)", 85)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        path, pod = str(facts.get("denied") or ""), str(facts.get("pod") or "")
        if not path or facts.get("reported"):
            return []
        workload = facts.get("owners", {}).get(pod, workload_of(pod))
        mounts: dict[str, str] = {}
        for name, found in facts.get("mounts", {}).items():
            if name == pod or facts.get("owners", {}).get(name) == workload:
                mounts.update(found)
        mount, source = _mount_of(path, mounts)
        security = facts.get("security", {}).get(workload)
        waited = not still_waiting(facts, _WAIT)
        if not mount or source.lower().startswith(
            ("emptydir", "configmap", "secret", "projected", "downwardapi")
        ):
            return []
        if security is None and not waited:
            return []
        security = security or {}
        user = security.get("user") or str(facts.get("log_user") or "")
        if security.get("fs_group") or not ((user and user != "0") or security.get("non_root")):
            return []
        facts["reported"] = True
        as_user = f"user {user}" if user else "a user other than root"
        non_root = " (runAsNonRoot)" if security.get("non_root") else ""
        fs_group = (
            "with no fsGroup in its pod's securityContext"
            if security
            else "(its securityContext was not read: whether it sets fsGroup is not known)"
        )
        volume = source.split(" ", 1)[-1] if source.startswith("persistentVolumeClaim ") else source
        crash = "crash at start" if facts.get("crashing") else "cannot write to their volume"
        owner = ""
        if facts.get("owner"):
            root = "root, uid 0" if facts["owner"] in ("0", "root") else f"uid {facts['owner']}"
            mode = f", mode {facts['mode']}" if facts.get("mode") else ""
            owner = f", owned by {root}{mode} (per its log)"
        return [
            Finding(
                "volume_permission_non_root",
                f"The pods of {workload} {crash}: their template runs as {as_user}{non_root} {fs_group}, "
                f"and the volume {volume} mounted at {mount}{owner} is not writable for that user, "
                "so creating "
                f"{path} fails with permission denied (errno 13) ('{clip(str(facts['line']), 120)}').",
                Severity.CRITICAL,
                f"pod/{pod}",
                clip(str(facts["line"])),
                91,
                f"Set the pod's securityContext.fsGroup (e.g. fsGroup: {user or 1000}, with "
                "fsGroupChangePolicy: OnRootMismatch) so the kubelet gives the volume to that group, "
                "or chown it once from an init "
                "container running as root.",
            )
        ]
