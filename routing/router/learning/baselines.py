"""Baselines the learned router must beat, each evaluated with the deployed policy on held-out calls.

- always-teacher: every call to the teacher.
- cascade: every call to the student, the teacher on a rejected answer (FrugalGPT-style).
- random: a random share of calls to the teacher up front (the learned router's share), the rest
  as the cascade; averaged over seeds.
- prompt-only (RouteLLM-style): TF-IDF of the last user message, logistic regression on "needs
  the teacher", its threshold chosen on the calibration shard as RouteLLM would, i.e. simulating
  routing WITHOUT the fallback (it does not know a verifier will catch some failures).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from routing.router.learning.calibration import CalibrationResult, PolicyData, Target, calibrate
from routing.router.learning.features import content_text
from routing.router.learning.metrics import PolicyMetrics, mean_metrics, policy_metrics
from routing.router.learning.records import ReplayRecord


def always_teacher(data: PolicyData) -> PolicyMetrics:
    return policy_metrics("always-teacher", data, np.ones(data.n, dtype=bool))


def cascade(data: PolicyData) -> PolicyMetrics:
    return policy_metrics("cascade (student + fallback)", data, np.zeros(data.n, dtype=bool))


def random_at_share(data: PolicyData, share: float, *, seeds: int = 20, seed: int = 0) -> PolicyMetrics:
    runs = []
    for i in range(seeds):
        rng = np.random.default_rng(seed + i)
        scores = rng.random(data.n)
        to_teacher = scores >= np.quantile(scores, 1 - share) if share > 0 else np.zeros(data.n, dtype=bool)
        runs.append(policy_metrics("random", data, to_teacher, scores=scores))
    return mean_metrics(f"random @ {share:.0%} teacher", runs, note=f"mean of {seeds} seeds")


def last_user_text(record: ReplayRecord) -> str:
    for message in reversed(record.request.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


class PromptOnlyRouter:
    """RouteLLM-style: the prompt alone, no profile, tools, turn or fallback awareness."""

    def __init__(self, *, max_features: int = 20000, c: float = 1.0, seed: int = 0) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        self.vectorizer = TfidfVectorizer(max_features=max_features, ngram_range=(1, 2), sublinear_tf=True)
        self.model = LogisticRegression(C=c, class_weight="balanced", max_iter=500, random_state=seed)
        self.calibration: CalibrationResult | None = None
        self._constant: float | None = None

    def fit(self, records: Sequence[ReplayRecord]) -> PromptOnlyRouter:
        labelled = [r for r in records if r.needs_teacher is not None]
        y = np.asarray([bool(r.needs_teacher) for r in labelled], dtype=int)
        x = self.vectorizer.fit_transform([last_user_text(r) for r in labelled])
        if len(np.unique(y)) < 2:
            self._constant = float(y.mean()) if len(y) else 0.0
        else:
            self.model.fit(x, y)
        return self

    def scores(self, records: Sequence[ReplayRecord]) -> np.ndarray:
        if self._constant is not None:
            return np.full(len(records), self._constant)
        x = self.vectorizer.transform([last_user_text(r) for r in records])
        return np.asarray(self.model.predict_proba(x)[:, 1], dtype=np.float64)

    def calibrate(self, records: Sequence[ReplayRecord], target: Target) -> CalibrationResult:
        # RouteLLM picks the threshold on its routing-only curve: no fallback in its simulation,
        # and no latency bound either.
        routing_only = Target(target.pass_rate, target.relative, None, target.z)
        self.calibration = calibrate(
            PolicyData.from_records(records), self.scores(records), routing_only, fallback=False
        )
        return self.calibration

    def evaluate(self, records: Sequence[ReplayRecord]) -> PolicyMetrics:
        assert self.calibration is not None, "calibrate first"
        data = PolicyData.from_records(records)
        scores = self.scores(records)
        threshold = self.calibration.threshold
        return policy_metrics(
            "prompt-only (RouteLLM-style)", data, scores >= threshold, scores=scores, threshold=threshold
        )


def baseline_rows(
    data: PolicyData, *, share: float, prompt_only: PromptOnlyRouter | None, test: Sequence[ReplayRecord]
) -> list[PolicyMetrics]:
    rows = [always_teacher(data), cascade(data), random_at_share(data, share)]
    if prompt_only is not None:
        rows.append(prompt_only.evaluate(test))
    return rows


def describe(rows: Sequence[PolicyMetrics]) -> list[dict[str, Any]]:
    return [row.to_json() for row in rows]
