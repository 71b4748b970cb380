"""A process that cannot write where it expects to because its root filesystem is read-only.

``readOnlyRootFilesystem: true`` mounts the container's image layers read-only: every write outside a
mounted volume fails with EROFS (errno 30), in each runtime's words: Python's ``OSError: [Errno 30]
Read-only file system: '/app/cache'``, Go's ``mkdir /app/cache: read-only file system``, Node's ``EROFS:
read-only file system, mkdir '/app/cache'``, Java's ``FileSystemException: /app/cache: Read-only file
system``, nginx's ``open() "/var/cache/nginx/x" failed (30: Read-only file system)``. The setting often
comes from no one's manifest but from an admission policy that mutates new pods (Kyverno notes the
patches it applied in ``policies.kyverno.io/last-applied-patches``; Gatekeeper in
``gatekeeper.sh/mutations``): pods created before the policy keep running, the next rollout's pods
crash. This analyzer ties the failing write (the log), the setting and who set it (the pod's manifest
and annotations), the mounts (a writable volume at the path clears the setting of blame) and the policy
(its creation time, the older pods still running).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.kubernetes.containers import workload_of
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.tables import age_seconds
from diagnostics.agent.findings import Finding, ObjRef, Severity

_EROFS = rx.compile(
    r"\[Errno 30\][^\n]*?Read-only file system:?\s*'?([^'\s]+)|"
    r"(?:mkdir|open|create|mkdirat|openat|write|rename|remove)\s+(/[^\s:]+):\s*read-only file system|"
    r"EROFS:?\s*read-only file system,\s*\w+\s+'([^']+)'|"
    r"(?:Exception|Error):\s*(/[^\s:]+):\s*Read-only file system|"
    r"\"(/[^\"]+)\"\s*failed\s*\(30:\s*Read-only file system\)",
    rx.IGNORECASE,
)
_KYVERNO = rx.compile(
    r"policies\.kyverno\.io/last-applied-patches:\s*([\w.-]+?)\.([\w-]+)\.kyverno\.io:\s*\w+\s+\S*readOnlyRootFilesystem"
)
_GATEKEEPER = rx.compile(r"gatekeeper\.sh/mutations:\s*(\w+)//?([\w.-]+)")
_DESCRIBE_MOUNT = rx.compile(r"^\s+(/\S*)\s+from\s+\S+\s+\((ro|rw)\)", rx.MULTILINE)
_RO_TRUE = rx.compile(r"readOnlyRootFilesystem\"?:\s*\"?true", rx.IGNORECASE)
_START = rx.compile(r"^Start Time:\s+(.+)$", rx.MULTILINE)
_HASHED = rx.compile(r"^(.+)-([a-z0-9]{6,10})-[a-z0-9]{5}$")
_KEY = "read_only_root"


def _path_of(line: str) -> str:
    match = _EROFS.search(line)
    return next((g for g in match.groups() if g), "").rstrip("'\",") if match else ""


def _pod_manifest(obj: dict[str, Any], facts: dict[str, Any]) -> None:
    """Records what a Pod manifest says: readOnlyRootFilesystem per container, its volume mounts."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    for container in spec.get("containers") or []:
        if not isinstance(container, dict):
            continue
        ctx = container.get("securityContext") if isinstance(container.get("securityContext"), dict) else {}
        assert isinstance(ctx, dict)
        if ctx.get("readOnlyRootFilesystem") is True:
            facts.setdefault("containers", set()).add(str(container.get("name") or ""))
        for mount in container.get("volumeMounts") or []:
            if isinstance(mount, dict) and mount.get("mountPath"):
                facts.setdefault("mounts", {})[str(mount["mountPath"])] = not bool(mount.get("readOnly"))


def _ages(listing: str, facts: dict[str, Any]) -> None:
    """pod -> (age in seconds, running) from a kubectl listing with STATUS and AGE columns."""
    table = parse_table(listing)
    if table is None or "AGE" not in table.header:
        return
    from_end = len(table.header) - table.header.index("AGE")  # RESTARTS may span cells: "3 (2m ago)"
    for row in table.rows:
        age = age_seconds(row[-from_end]) if len(row) >= from_end else None
        if row and age is not None:
            facts.setdefault("ages", {})[row[0]] = (age, table.column(row, "STATUS") == "Running")


def _covered(path: str, mounts: dict[str, bool]) -> bool:
    """Whether a writable volume is mounted at ``path`` or above it."""
    return any(
        writable and (path == mount or path.startswith(mount.rstrip("/") + "/"))
        for mount, writable in mounts.items()
    )


@register
class ReadOnlyRootAnalyzer(Analyzer):
    name = "read_only_root_filesystem"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict(_KEY)
        text = out.text
        if out.is_log:
            lines = [ln for ln in text.splitlines() if _EROFS.search(ln)]
            if lines and _path_of(lines[-1]):
                pod = str(out.params.get("pod_name") or "")
                facts.update(line=lines[-1], path=_path_of(lines[-1]), pod=pod)
                namespace = str(out.params.get("namespace") or "")
                if pod and namespace:
                    state.lead(ObjRef("pod", pod, namespace), "who made the root filesystem read-only", 86)
            return self._findings(state)
        if "readOnlyRootFilesystem" not in text and not ("Mounts:" in text or "AGE" in text):
            return self._findings(state)
        if policy := _KYVERNO.search(text):
            facts.update(policy=policy.group(1), rule=policy.group(2), engine="Kyverno")
            state.lead(
                ObjRef("clusterpolicy", policy.group(1)), "the policy that set readOnlyRootFilesystem", 87
            )
        elif (policy := _GATEKEEPER.search(text)) and "readOnlyRootFilesystem" in text:
            facts.update(policy=policy.group(2), rule="", engine="Gatekeeper")
        for mount, mode in _DESCRIBE_MOUNT.findall(text):
            facts.setdefault("mounts", {})[mount] = mode == "rw"
        obj = manifest_of(text)
        if obj is not None and obj.get("kind") == "Pod":
            _pod_manifest(obj, facts)
        elif obj is not None and "Policy" in str(obj.get("kind")) and _RO_TRUE.search(text):
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            assert isinstance(meta, dict)
            facts.setdefault("policies", {})[str(meta.get("name") or "")] = (
                str(obj.get("kind")),
                str(meta.get("creationTimestamp") or ""),
            )
        elif "AGE" in text and "STATUS" in text:
            _ages(text, facts)
        if started := _START.search(text):
            facts.setdefault("started", {})[field_value(text, "Name")] = started.group(1).strip()
        return self._findings(state)

    @staticmethod
    def _findings(state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict(_KEY)
        path = str(facts.get("path") or "")
        if not path or not (facts.get("containers") or facts.get("policy")):
            return []
        mounts: dict[str, bool] = facts.get("mounts") or {}
        if _covered(path, mounts):
            return []  # a writable volume is there: the setting is not why the write fails
        found: list[Finding] = []
        pod = str(facts.get("pod") or "")
        workload = workload_of(pod) if pod else "the container"
        policy = str(facts.get("policy") or "")
        who = (
            f", set by the {facts['engine']} policy {policy}"
            + (f" (rule {facts['rule']})" if facts.get("rule") else "")
            + " when the pod was created"
            if policy
            else ""
        )
        if not facts.get("reported"):
            facts["reported"] = True
            found.append(
                Finding(
                    _KEY,
                    f"{workload} exits at start with errno 30 (EROFS, Read-only file system) creating "
                    f"{path}: "
                    f"its container runs with readOnlyRootFilesystem true{who}, and no writable volume is "
                    f"mounted at {path} ('{clip(str(facts['line']), 140)}').",
                    Severity.CRITICAL,
                    f"pod/{pod}" if pod else "",
                    clip(str(facts["line"])),
                    93,
                    f"Mount a writable volume (an emptyDir) at {path} or point the application at one, or "
                    + (f"exclude {workload} from {policy}." if policy else "drop readOnlyRootFilesystem."),
                )
            )
        known: dict[str, tuple[str, str]] = facts.get("policies") or {}
        if policy in known and not facts.get("policy_reported"):
            facts["policy_reported"] = True
            kind, created = known[policy]
            found.append(
                Finding(
                    f"{_KEY}_policy",
                    f"The {facts['engine']} {kind} {policy}, created {created or 'at an unknown time'}, now "
                    "sets readOnlyRootFilesystem true on every new pod it matches (a mutation at admission: "
                    "pods created before it are not changed).",
                    Severity.WARNING,
                    f"{kind.lower()}/{policy}",
                    f"{kind} {policy}: readOnlyRootFilesystem: true",
                    80,
                )
            )
        if (
            policy in known
            and not facts.get("older_reported")
            and (older := _older(facts, pod, known[policy][1]))
        ):
            facts["older_reported"] = True
            found.append(
                Finding(
                    f"{_KEY}_older_pods",
                    f"The pods older than the policy {policy} still run ({older}): they were created before "
                    "it, so the change that started this rollout only triggered new pods, which the policy "
                    "mutates.",
                    Severity.WARNING,
                    f"pod/{pod}",
                    older,
                    60,
                )
            )
        return found


def _moment(value: str) -> datetime | None:
    try:
        moment = (
            datetime.fromisoformat(value.replace("Z", "+00:00"))
            if value[:1].isdigit()
            else parsedate_to_datetime(value)
        )
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _older(facts: dict[str, Any], pod: str, created: str) -> str:
    """The running pods of ``pod``'s workload from another template created before the policy, when a
    listing (their ages) and the failing pod's start time (what the ages count from) say so; else ""."""
    own = _HASHED.match(pod)
    ages: dict[str, tuple[int, bool]] = facts.get("ages") or {}
    started = _moment(str((facts.get("started") or {}).get(pod) or ""))
    policy_at = _moment(created)
    if not own or pod not in ages or started is None or policy_at is None:
        return ""
    now = started + timedelta(seconds=ages[pod][0])
    older = []
    for name, (age, running) in sorted(ages.items()):
        other = _HASHED.match(name)
        same = other is not None and other.group(1) == own.group(1) and other.group(2) != own.group(2)
        if same and running and now - timedelta(seconds=age) < policy_at:
            older.append(f"{name}, {_days(age)} old")
    return "; ".join(older[:3])


def _days(seconds: int) -> str:
    return f"{seconds // 86400}d" if seconds >= 86400 else f"{seconds // 3600}h"
