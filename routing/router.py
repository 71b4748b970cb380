"""The router interface: ``route(call) -> Decision`` with a score, and its fixed policies.

Policies are a small ABC plus a registry keyed by TaskProfile.policy (house style 8). The
learned, calibrated router of the MERA issue registers itself here as one more policy.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from routing.models import Invocation, TaskProfile
from routing.protocol import ChatRequest


@dataclass(frozen=True)
class Call:
    """Everything the router may look at: the whole request and its task profile."""

    request: ChatRequest
    profile: TaskProfile
    has_verifier: bool

    @property
    def turn_index(self) -> int:
        return sum(1 for m in self.request.messages if m.role == "assistant")

    def serialized(self) -> str:
        return json.dumps(
            {
                "messages": [m.model_dump(exclude_none=True) for m in self.request.messages],
                "tools": [t.model_dump(exclude_none=True) for t in self.request.tools or []],
            },
            ensure_ascii=False,
            sort_keys=True,
        )


@dataclass(frozen=True)
class Decision:
    route: str  # Invocation.Route
    score: float | None
    policy: str
    reason: str


class Router(ABC):
    policy: ClassVar[str]

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    @abstractmethod
    def route(self, call: Call) -> Decision: ...


_ROUTERS: dict[str, type[Router]] = {}


def register(cls: type[Router]) -> type[Router]:
    _ROUTERS[cls.policy] = cls
    return cls


def build_router(profile: TaskProfile) -> Router:
    try:
        cls = _ROUTERS[profile.policy]
    except KeyError:
        raise ValueError(f"Task profile {profile.name!r} has unknown policy {profile.policy!r}") from None
    return cls(profile.policy_params or {})


@register
class AlwaysTeacher(Router):
    policy = TaskProfile.Policy.ALWAYS_TEACHER

    def route(self, call: Call) -> Decision:
        return Decision(Invocation.Route.TEACHER, None, self.policy, "policy sends every call to the teacher")


@register
class StudentWithFallback(Router):
    """Every call tries the student; a failed verification falls back to the teacher."""

    policy = TaskProfile.Policy.STUDENT_WITH_FALLBACK

    def route(self, call: Call) -> Decision:
        reason = "student first, teacher on a failed verification"
        if not call.has_verifier:
            reason = "student; no verifier on this profile, so no fallback"
        return Decision(Invocation.Route.STUDENT, None, self.policy, reason)


@register
class Threshold(Router):
    """score >= threshold goes to the teacher. The fixed score is the prompt's size relative to
    ``scale`` bytes (longer calls are harder); the learned router replaces the score."""

    policy = TaskProfile.Policy.THRESHOLD

    def score(self, call: Call) -> float:
        scale = float(self.params.get("scale", 4000))
        return min(1.0, len(call.serialized().encode()) / scale)

    def route(self, call: Call) -> Decision:
        threshold = float(self.params.get("threshold", 0.5))
        score = self.score(call)
        route = Invocation.Route.TEACHER if score >= threshold else Invocation.Route.STUDENT
        return Decision(route, score, self.policy, f"score {score:.3f} vs threshold {threshold:.3f}")
