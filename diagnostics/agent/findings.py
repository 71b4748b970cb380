"""What analyzers produce: findings (facts with evidence), leads (objects worth a look) and remedies."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    CRITICAL = 2


@dataclass(frozen=True)
class ObjRef:
    """Something in the environment: a pod, a deployment, a PVC, a trace, an Argo CD app, a URL..."""

    kind: str
    name: str
    namespace: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", normalize_kind(self.kind))

    @property
    def label(self) -> str:
        if self.namespace:
            return f"{self.kind}/{self.namespace}/{self.name}"
        return f"{self.kind}/{self.name}" if self.kind else self.name


_KIND_ALIASES = {
    "pods": "pod",
    "po": "pod",
    "deploy": "deployment",
    "deployments": "deployment",
    "jobs": "job",
    "pvc": "persistentvolumeclaim",
    "persistentvolumeclaims": "persistentvolumeclaim",
    "pv": "persistentvolume",
    "pdb": "poddisruptionbudget",
    "svc": "service",
    "services": "service",
    "sts": "statefulset",
    "statefulsets": "statefulset",
    "ds": "daemonset",
    "daemonsets": "daemonset",
    "rs": "replicaset",
    "replicasets": "replicaset",
    "nodes": "node",
    "ns": "namespace",
    "namespaces": "namespace",
    "hpa": "horizontalpodautoscaler",
    "cronjobs": "cronjob",
}


def normalize_kind(kind: str) -> str:
    lowered = (kind or "").strip().lower()
    return _KIND_ALIASES.get(lowered, lowered)


@dataclass(frozen=True)
class Remedy:
    """A standard fix a finding implies: candidate action names (best first) and their arguments.

    It is only a suggestion: the Observer turns it into an ActionRequest when the environment
    offers one of the actions, and nothing runs until a person approves it.
    """

    actions: tuple[str, ...]
    target: str
    args: dict[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True)
class Finding:
    kind: str
    summary: str
    severity: Severity = Severity.WARNING
    subject: str = ""
    evidence: str = ""
    # How likely this is the root cause rather than a symptom (0..100); orders the diagnosis.
    rank: int = 50
    fix: str = ""
    remedy: Remedy | None = None
    # When it was true (ISO 8601 UTC): its log lines' time, or when the state it states was read; "" unknown.
    at: str = ""
    # True only before the evidence window (the incident's window, the last executed fix): no root cause.
    history: bool = False

    @property
    def is_problem(self) -> bool:
        """A current problem: a warning or worse that is not history."""
        return self.severity >= Severity.WARNING and not self.history

    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.subject, self.summary)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "summary": self.summary,
            "severity": self.severity.name.lower(),
            "subject": self.subject,
            "rank": self.rank,
        }
        if self.evidence:
            data["evidence"] = self.evidence
        if self.fix:
            data["fix"] = self.fix
        if self.at:
            data["at"] = self.at
        if self.history:
            data["history"] = True
        if self.remedy is not None:
            data["remedy"] = {
                "actions": list(self.remedy.actions),
                "target": self.remedy.target,
                "args": self.remedy.args,
                "description": self.remedy.description,
            }
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        remedy = data.get("remedy")
        return cls(
            kind=str(data.get("kind", "")),
            summary=str(data.get("summary", "")),
            severity=Severity[str(data.get("severity", "warning")).upper()],
            subject=str(data.get("subject", "")),
            evidence=str(data.get("evidence", "")),
            rank=int(data.get("rank", 50)),
            fix=str(data.get("fix", "")),
            at=str(data.get("at", "")),
            history=bool(data.get("history", False)),
            remedy=Remedy(
                actions=tuple(remedy.get("actions", ())),
                target=str(remedy.get("target", "")),
                args=dict(remedy.get("args", {})),
                description=str(remedy.get("description", "")),
            )
            if isinstance(remedy, dict)
            else None,
        )
