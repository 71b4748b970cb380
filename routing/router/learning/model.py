"""The learned router's model: class-balanced logistic regression, grouped CV, Platt calibration.

Training uses scikit-learn; inference is pure numpy over the JSON the model serialises to (no
pickle: a RouterVersion row, or a file shared between installations, is data, never code).

score(x) = sigmoid(a * (w . (x - mean) / scale + b) + c): the standardised linear logit of a
class-balanced fit, mapped by Platt parameters (a, c) fitted on out-of-fold logits of grouped
cross-validation, so the score is a calibrated probability that the call needs the teacher.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from routing.router.learning.features import PER_FEATURE_BLOCKS, FeatureSpec, FeatureSpecError

FORMAT = "skillgate.router.logreg/1"
SHRINK = 2.0  # a profile's deviation from the shared meta coefficients costs SHRINK**2 under L2
# The text blocks' weights grouped CV chooses from (1: as scaled; 0.2: their coefficients cost 25x).
TEXT_WEIGHTS = (1.0, 0.2)


def sigmoid(z: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0))), dtype=np.float64)


@dataclass
class LearnedRouterModel:
    feature_spec: FeatureSpec
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    platt_a: float
    platt_b: float
    info: dict[str, Any] = field(default_factory=dict)
    # Calibrated out-of-fold scores of the training calls (grouped CV), in their order: a larger
    # calibration set for the threshold (cross-fitting). Not saved: only training uses them.
    oof_scores: np.ndarray | None = field(default=None, repr=False, compare=False)

    def check_spec(self, spec: FeatureSpec) -> None:
        if spec != self.feature_spec:
            raise FeatureSpecError(
                f"features of another kind: model has {self.feature_spec.to_json()}, got {spec.to_json()}"
            )

    def logits(self, features: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(np.asarray(features, dtype=np.float64))
        if x.shape[1] != self.coef.shape[0]:
            raise FeatureSpecError(f"expected {self.coef.shape[0]} features, got {x.shape[1]}")
        return np.asarray(((x - self.mean) / self.scale) @ self.coef + self.intercept)

    def score_many(self, features: np.ndarray) -> np.ndarray:
        return sigmoid(self.platt_a * self.logits(features) + self.platt_b)

    def score(self, features: np.ndarray) -> float:
        """Calibrated probability that this call needs the teacher: one call's row (the gateway's hot
        path), through the standardisation folded into the weights once per model (one dot product
        instead of three passes and a matrix product: ~60 -> ~10 µs; the score agrees with
        ``score_many`` to ~1e-15, tests/routing/router/test_model.py)."""
        x = np.asarray(features)
        if x.ndim != 1:
            return float(self.score_many(x)[0])
        weights, bias = self._folded()
        if x.shape[0] != weights.shape[0]:
            raise FeatureSpecError(f"expected {weights.shape[0]} features, got {x.shape[0]}")
        z = self.platt_a * (float(x @ weights) + bias) + self.platt_b
        return 1.0 / (1.0 + math.exp(-min(max(z, -60.0), 60.0)))

    def _folded(self) -> tuple[np.ndarray, float]:
        """(coef / scale, intercept - (mean / scale) . coef): w . (x - mean) / scale + b as x . w' + b'."""
        folded = self.__dict__.get("_folded_weights")
        if folded is None:
            weights = self.coef / self.scale
            folded = (weights, float(self.intercept - self.mean @ weights))
            self.__dict__["_folded_weights"] = folded
        return folded

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "feature_spec": self.feature_spec.to_json(),
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
            "platt": {"a": self.platt_a, "b": self.platt_b},
            "info": self.info,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LearnedRouterModel:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} model")
        spec = FeatureSpec.from_json(data["feature_spec"])
        arrays = [np.asarray(data[k], dtype=np.float64) for k in ("mean", "scale", "coef")]
        if any(a.shape != (spec.dims,) for a in arrays):
            raise ValueError(f"model arrays do not match the spec's {spec.dims} features")
        numbers = [
            *arrays,
            np.asarray([data["intercept"], data["platt"]["a"], data["platt"]["b"]], dtype=np.float64),
        ]
        if not all(np.isfinite(a).all() for a in numbers) or (arrays[1] <= 0).any():
            raise ValueError("model parameters must be finite, scales positive")
        return cls(
            feature_spec=spec,
            mean=arrays[0],
            scale=arrays[1],
            coef=arrays[2],
            intercept=float(data["intercept"]),
            platt_a=float(data["platt"]["a"]),
            platt_b=float(data["platt"]["b"]),
            info=dict(data.get("info") or {}),
        )


def _fit_lr(x: np.ndarray, y: np.ndarray, c: float, seed: int) -> tuple[np.ndarray, float]:
    from sklearn.exceptions import ConvergenceWarning  # sklearn: ~3 s of every process's start-up
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    lr = LogisticRegression(C=c, class_weight="balanced", max_iter=500, random_state=seed)
    with threadpool_limits(1), warnings.catch_warnings():  # 2 BLAS threads on 2 busy cores: 3x slower
        warnings.simplefilter("ignore", ConvergenceWarning)
        lr.fit(x, y)
    return lr.coef_[0].astype(np.float64), float(lr.intercept_[0])


def _standardizer(
    x: np.ndarray, spec: FeatureSpec, *, shrink: float = 1.0, text_weight: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature scaling for the meta and profile blocks; one scale per text block (hashed n-grams
    and embeddings keep their geometry, and rare n-grams are not blown up), divided by
    ``text_weight``: below 1 the text's coefficients cost more under the L2 penalty, so the model
    leans on the call's structure where the words carry little (a profile of tool calls) and on the
    words where they carry much (a diagnosis), as grouped CV chooses.

    The profile x meta block is the pooling: each profile's deviation from the shared meta
    coefficients. It is scaled by the shared feature's spread times ``shrink``, not by its own
    (a profile with few calls has a small spread, which per-feature scaling would turn into a weak
    penalty), so a deviation costs ``shrink**2`` times a shared coefficient under the L2 penalty: a
    profile with a few hundred calls leans on what the others show, one with many may differ."""
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    scale = np.ones(x.shape[1])
    start, sizes = 0, spec.block_sizes
    shared = np.where(std[: sizes["meta"]] < 1e-8, 1.0, std[: sizes["meta"]])
    for name, size in sizes.items():
        block = slice(start, start + size)
        if name == "inter" and size:
            scale[block] = np.tile(shared, size // len(shared)) * shrink
        elif name in PER_FEATURE_BLOCKS:
            scale[block] = np.where(std[block] < 1e-8, 1.0, std[block])
        elif size:
            rms = float(np.sqrt(np.mean(std[block] ** 2)))
            scale[block] = (rms if rms > 1e-8 else 1.0) / text_weight
        start += size
    return mean, scale


def _platt(logits: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    from sklearn.linear_model import LogisticRegression

    if len(np.unique(y)) < 2:
        prevalence = min(max(float(y.mean()), 1e-4), 1 - 1e-4)
        return 0.0, math.log(prevalence / (1 - prevalence))
    platt = LogisticRegression(C=1e4, max_iter=1000).fit(logits.reshape(-1, 1), y)
    return float(platt.coef_[0, 0]), float(platt.intercept_[0])


def fit_router_model(
    features: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    *,
    spec: FeatureSpec,
    c_grid: tuple[float, ...] = (0.003, 0.01, 0.03, 0.1),
    folds: int = 5,
    seed: int = 0,
    shrink: float = SHRINK,
    text_weights: tuple[float, ...] = TEXT_WEIGHTS,
) -> LearnedRouterModel:
    """Pick C and the text blocks' weight by grouped CV (ROC AUC of out-of-fold logits),
    Platt-calibrate on those logits, then refit on everything. Groups are task ids: a task's calls
    never straddle folds."""
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import GroupKFold

    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if x.ndim != 2 or x.shape[1] != spec.dims or len(y) != len(x):
        raise FeatureSpecError(f"features must be (n, {spec.dims}) with one label per row")
    info: dict[str, Any] = {
        "n": len(y),
        "positives": int(y.sum()),
        "groups": len(np.unique(groups)),
        "shrink": shrink,
    }
    if len(np.unique(y)) < 2:
        mean, scale = _standardizer(x, spec, shrink=shrink)
        a, b = _platt(np.zeros(len(y)), y)
        info["note"] = "one class only: constant score"
        return LearnedRouterModel(spec, mean, scale, np.zeros(spec.dims), 0.0, a, b, info)
    n_folds = min(folds, info["groups"])
    best: tuple[float, float, float, np.ndarray] | None = None
    has_text = any(size for name, size in spec.block_sizes.items() if name not in PER_FEATURE_BLOCKS)
    weights = text_weights if has_text else (1.0,)
    if n_folds >= 2:
        splits = list(GroupKFold(n_splits=n_folds).split(x, y, groups))
        for text_weight in weights:
            mean, scale = _standardizer(x, spec, shrink=shrink, text_weight=text_weight)
            z = (x - mean) / scale
            for c in c_grid:
                oof = np.zeros(len(y))
                for train, test in splits:
                    if len(np.unique(y[train])) < 2:
                        oof[test] = 0.0
                        continue
                    w, b0 = _fit_lr(z[train], y[train], c, seed)
                    oof[test] = z[test] @ w + b0
                auc = float(roc_auc_score(y, oof))
                info.setdefault("cv_auc", {})[f"C={c:g} text={text_weight:g}"] = round(auc, 4)
                if best is None or auc > best[0]:
                    best = (auc, c, text_weight, oof)
    c = best[1] if best else c_grid[len(c_grid) // 2]
    text_weight = best[2] if best else 1.0
    mean, scale = _standardizer(x, spec, shrink=shrink, text_weight=text_weight)
    z = (x - mean) / scale
    coef, intercept = _fit_lr(z, y, c, seed)
    calibration_logits = best[3] if best else z @ coef + intercept
    a, b = _platt(calibration_logits, y)
    info.update(
        {
            "C": c,
            "text_weight": text_weight,
            "folds": n_folds,
            "platt_on": "out-of-fold" if best else "in-sample",
        }
    )
    oof_scores = sigmoid(a * best[3] + b) if best else None
    return LearnedRouterModel(spec, mean, scale, coef, intercept, a, b, info, oof_scores)
