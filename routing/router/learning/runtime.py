"""Routing a live call with a stored router version (what the gateway calls).

    router = loaded_router(version.pk, model=version.model, threshold=version.threshold)
    decision = router.decide(CallInput.from_call(call))   # call: routing.router.policies.Call
    Decision(decision.route, decision.score, "learned", decision.reason)

Routers and featurizers are built on first use and kept per process (the embedder holds an
onnxruntime session and a cache of context embeddings); nothing is built at import time. The first
use loads the ONNX session (~0.3 s): warm it at worker start with ``loaded_router(...)`` if that
matters.

A router remembers the scores of the last ``SCORES_CACHED`` calls it featurized, keyed by a digest of
everything its features read (``CallInput.digest``): a call sent again (a client's retry, a batch
that repeats a prompt, a replay) is decided without featurizing it again (tokenizing and embedding a
long conversation costs milliseconds). A version's model and featurizer never change, so a cached
score is the score; a new version is a new router with an empty cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routing.router.learning.features import CallInput, FeatureSpec, Featurizer, make_featurizer, spec_digest
from routing.router.learning.model import LearnedRouterModel

TEACHER, STUDENT = "teacher", "student"
SCORES_CACHED = 4096  # per router: ~0.2 kB each (a 16-byte digest and a float)


@dataclass(frozen=True)
class RouteDecision:
    route: str
    score: float
    reason: str


class LoadedRouter:
    def __init__(self, model: LearnedRouterModel, threshold: float, featurizer: Featurizer) -> None:
        model.check_spec(featurizer.spec)  # FeatureSpecError: features of another kind
        self.model = model
        self.threshold = float(threshold)
        self.featurizer = featurizer
        self._scores: OrderedDict[str, float] = OrderedDict()
        self._scores_lock = threading.Lock()

    @classmethod
    def from_fields(
        cls, *, model: dict[str, Any], threshold: float, folder: Path | None = None, build: bool = False
    ) -> LoadedRouter:
        """From a RouterVersion's JSON. Raises FeatureSpecError when this machine cannot compute the
        model's features (e.g. MiniLM missing): the caller then keeps the profile's fixed policy."""
        parsed = LearnedRouterModel.from_json(model)
        return cls(parsed, threshold, featurizer_for(parsed.feature_spec, folder=folder, build=build))

    def score(self, call: CallInput) -> float:
        found = self.known_score(call)
        if found is not None:
            return found
        score = self.model.score(self.featurizer.transform(call))
        key = call.digest()
        if key is not None:
            with self._scores_lock:
                self._scores[key] = score
                if len(self._scores) > SCORES_CACHED:
                    self._scores.popitem(last=False)
        return score

    def known_score(self, call: CallInput) -> float | None:
        """The score of a call featurized before (the same inputs), without featurizing it: None if not
        cached (then ``score`` computes it, on a worker thread when ``featurizer.runs_model``)."""
        key = call.digest()
        if key is None:
            return None
        with self._scores_lock:
            found = self._scores.get(key)
            if found is not None:
                self._scores.move_to_end(key)
        return found

    def decide(self, call: CallInput) -> RouteDecision:
        score = self.score(call)
        route = TEACHER if score >= self.threshold else STUDENT
        return RouteDecision(route, score, f"learned score {score:.3f} vs threshold {self.threshold:.3f}")


_FEATURIZERS: dict[str, Featurizer] = {}
_ROUTERS: dict[Any, LoadedRouter] = {}
_LOCK = threading.Lock()


def featurizer_for(spec: FeatureSpec, *, folder: Path | None = None, build: bool = False) -> Featurizer:
    key = f"{spec_digest(spec)}:{folder}"
    with _LOCK:
        if key not in _FEATURIZERS:
            _FEATURIZERS[key] = make_featurizer(spec, folder=folder, build=build)
        return _FEATURIZERS[key]


def cached_router(key: Any) -> LoadedRouter | None:
    """The router already loaded for ``key`` in this process, if any (no database read needed)."""
    with _LOCK:
        return _ROUTERS.get(key)


def loaded_router(key: Any, *, model: dict[str, Any], threshold: float, build: bool = False) -> LoadedRouter:
    """The process's router for ``key`` (e.g. the RouterVersion id; versions are immutable).
    ``build=False``: a request never waits minutes for the MiniLM assets; build them at set-up
    (``embedding.build_assets()``) or in the training job, which runs before any version exists."""
    with _LOCK:
        found = _ROUTERS.get(key)
    if found is not None:
        return found
    router = LoadedRouter.from_fields(model=model, threshold=threshold, build=build)
    with _LOCK:
        return _ROUTERS.setdefault(key, router)


def forget_routers() -> None:
    with _LOCK:
        _ROUTERS.clear()
