"""The router interface: ``route(call) -> Decision`` with a score, and its fixed policies.

Policies are a small ABC plus a registry keyed by TaskProfile.policy (house style 8). The
learned, calibrated router of the MERA issue registers itself here as one more policy.
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from asgiref.sync import async_to_sync

from core.db import run_sync
from routing.access import lookups
from routing.models import Invocation, RouterVersion, TaskProfile
from routing.protocol import ChatRequest
from routing.router.learning.features import CallInput, FeatureSpecError
from routing.router.learning.runtime import LoadedRouter, cached_router, loaded_router
from routing.router.versions.config import labelling
from routing.router.versions.drift import is_held, is_suspected
from routing.router.versions.readmission import AGAIN
from routing.router.versions.truth import FixedChoice, fixed_choice


@dataclass(frozen=True)
class Call:
    """Everything the router may look at: the whole request and its task profile."""

    request: ChatRequest
    profile: TaskProfile
    has_verifier: bool
    # ``request.model_dump(exclude_none=True)`` when the caller made it already (the call's plan's
    # ``request_dict``): the router's features read its messages and tools instead of dumping again.
    dumped: dict[str, Any] | None = None

    @property
    def turn_index(self) -> int:
        return sum(1 for m in self.request.messages if m.role == "assistant")

    def serialized(self) -> str:
        dumped = self.dumped
        if dumped is None:
            dumped = self.request.model_dump(include={"messages", "tools"}, exclude_none=True)
        return json.dumps(
            {"messages": dumped["messages"], "tools": dumped.get("tools") or []},
            ensure_ascii=False,
            sort_keys=True,
        )


@dataclass(frozen=True)
class Decision:
    route: str  # Invocation.Route
    score: float | None
    policy: str
    reason: str
    version_id: int | None = None  # the RouterVersion that decided (learned policy)
    sample_boost: float = 1.0  # background sampling rates x this: drift suspected, or too few labels


class Router(ABC):
    policy: ClassVar[str]

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    @abstractmethod
    def route(self, call: Call) -> Decision: ...

    async def aroute(self, call: Call) -> Decision:
        """What the (async) gateway calls; a policy that reads the database overrides it."""
        return self.route(call)


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


def fixed_fallback(profile: TaskProfile, has_verifier: bool) -> Router:
    """The fixed policy a learned profile uses while it has no usable router version:
    ``policy_params.fallback``, else the cascade when the call has a verifier, else the teacher."""
    params = profile.policy_params or {}
    default = TaskProfile.Policy.STUDENT_WITH_FALLBACK if has_verifier else TaskProfile.Policy.ALWAYS_TEACHER
    name = params.get("fallback") or default
    cls = _ROUTERS.get(name)
    if cls is None or cls.policy == TaskProfile.Policy.LEARNED:
        raise ValueError(f"Task profile {profile.name!r} has an invalid fallback policy {name!r}")
    return cls(params.get("fallback_params") or {})


@dataclass(frozen=True)
class ActiveVersion:
    """The profile's active RouterVersion as a call needs it; ``pk`` None when it has none."""

    pk: int | None
    number: int = 0
    threshold: float | None = None
    # the drift check flagged it, or holds it (correctness suspected while cost or inputs drifted): the
    # profile is served by its safe fixed policy
    drift: str = ""
    suspected: bool = False  # the drift check leans towards drift: sample more
    admitted: float | None = None  # the threshold it was admitted with (``threshold``: the one it serves at)


def _active_version(profile_id: int) -> ActiveVersion:
    found = (
        RouterVersion.objects.filter(profile_id=profile_id, status=RouterVersion.Status.ACTIVE)
        .values_list("pk", "number", "threshold", "drift_flag", "drift_reason", "calibration__recalibrated")
        .first()
    )
    if found is None:
        return ActiveVersion(None)
    drift = (found[4] or "drift flagged") if found[3] or is_held(found[3], found[4] or "") else ""
    # recalibrated on its labels (``versions.refit``): it routes at the threshold re-fitted there
    again = found[5].get("threshold") if isinstance(found[5], dict) else None
    threshold = (
        float(again) if isinstance(again, int | float) else None if found[2] is None else float(found[2])
    )
    suspected = is_suspected(found[3], found[4] or "")
    return ActiveVersion(found[0], found[1], threshold, drift, suspected, found[2])


def _load(key: Any, pk: int, threshold: float) -> LoadedRouter:
    model = RouterVersion.objects.values_list("model", flat=True).get(pk=pk)
    return loaded_router(key, model=model, threshold=threshold)


@register
class Learned(Router):
    """The profile's active RouterVersion: its calibrated score >= its threshold goes to the teacher;
    below, the student answers (the teacher backs up a failed verification, as in the cascade).

    Which version is active is a per-process lookup (routing/access/lookups.py: cleared at once by an
    admission or a rollback in this process, within the lookup TTL in others), so a call makes no
    query; the fitted model is loaded once per process per version id (versions are immutable). The
    features are computed off the event loop when they need the embedding model, and not at all for a
    call the router scored before (routing/router/learning/runtime.py's score cache). No active version,
    or a model whose features this machine cannot compute (FeatureSpecError, e.g. MiniLM missing): the
    profile's fixed fallback decides: the cheapest fixed policy whose measured quality on labelled
    calls meets the target with its confidence bound, else (or with too few labels) the teacher
    (``routing.router.versions.truth.fixed_choice``, read once per lookup TTL per process); the
    decision's reason says which and why.
    """

    policy = TaskProfile.Policy.LEARNED

    async def aroute(self, call: Call) -> Decision:
        profile_id = call.profile.pk
        active = await lookups.cached("router_version", profile_id, lambda: _active_version(profile_id))
        if active is None or active.pk is None:
            return await self._fallback(call, "no active router version")
        pk, number, threshold = active.pk, active.number, active.threshold
        if threshold is None:
            return await self._fallback(call, f"router v{number} has no threshold")
        if active.drift:
            stop, again = (*active.drift.split(AGAIN, 1), "")[:2]
            again = f"; measured again since the stop: {again[:240]}" if again else ""
            return await self._fallback(call, f"router v{number} is drifting ({stop[:200]}{again})")
        key = pk if threshold == active.admitted else (pk, threshold)  # a recalibration: another router
        router: LoadedRouter | None = cached_router(key)
        if router is None:
            try:
                router = await run_sync(_load, key, pk, threshold)
            except (FeatureSpecError, ValueError, KeyError, TypeError) as exc:
                return await self._fallback(call, f"router v{number} is unusable here ({exc})")
        features = CallInput.from_call(call)
        if router.known_score(features) is None and router.featurizer.runs_model(features):
            decided = await asyncio.to_thread(router.decide, features)
        else:
            decided = router.decide(features)
        boost = labelling(call.profile).boost if active.suspected else 1.0
        reason = f"v{number}: {decided.reason}" + (
            "; drift suspected: sampling more" if active.suspected else ""
        )
        return Decision(decided.route, decided.score, self.policy, reason, pk, boost)

    def route(self, call: Call) -> Decision:
        return async_to_sync(self.aroute)(call)

    async def _fallback(self, call: Call, why: str) -> Decision:
        profile = call.profile
        choice: FixedChoice | None = await lookups.cached(
            "fixed_choice", profile.pk, lambda: fixed_choice(profile)
        )
        if choice is None or choice.policy == TaskProfile.Policy.ALWAYS_TEACHER:
            router: Router = AlwaysTeacher({})
        else:
            router = fixed_fallback(profile, call.has_verifier)
        decision = router.route(call)
        measured = f"; {choice.reason}" if choice is not None else ""
        # Too few labels to measure the fallback, or its drift watch leaning towards drift: sample more,
        # so that labels come sooner.
        sample_more = choice is None or choice.sample_more
        boost = labelling(profile).boost if sample_more else 1.0
        reason = f"{why}{measured}; {decision.reason}"
        return Decision(decision.route, decision.score, decision.policy, reason, None, boost)
