"""Recalibration on labelled samples (issue 38): a version whose prediction was wrong, on the labels of
its own answers, is re-fitted from them cheaply, in both directions, instead of only stopped, held or
retrained.

The model: the version's calibration curve (the points ``CalibrationResult.to_json`` stores, the chosen
one merged in) cuts its calibration calls into score bins, each with the share of calls the student
answered itself there and how often it was right (smoothed by half a call each way). On the traffic now,
the student's rate in every bin is moved by one log-odds offset ``delta`` (a Platt shift of slope 1):
sigmoid(logit r + delta). ``delta`` is fitted by maximum likelihood on the labelled answers, grouped by the
threshold that served them (a background sample is a uniform draw of the stratum below it), and bounded
by the likelihood ratio (Wilks: a fall of z^2 / 2, the target's z). Every threshold's served pass rate
and its calibrated margin (the lower confidence bound of pass - required) move by what the offset at its
*lower* bound changes in the stratum below it; the cheapest threshold whose moved margin still meets the
target serves (``choose``), predicted at the fitted offset, so its own drift test watches the new
prediction. When only the teacher meets it, the version stops (or is held) as before.

Both directions are asked of evidence that is valid at every look: *worse* when the correctness SPRT
decided drift or leans towards it while another test found drift (the drift check's stop and hold),
*better* when the mixture SPRT (``sequential.meets_sprt``) shows the student's answers right above their
prediction (``better_shown``): a too-conservative version routes more to the student only on labels.
Fewer than ``MIN_LABELS`` labels: no change. Unknown labels are never among them.

    curve_of(calibration)                      -> Curve | None
    fit_offset(curve, groups, z)               -> Fit (delta, its bounds, labels, right)
    choose(curve, delta, required)             -> the cheapest point meeting the target, moved
    recalibrate(calibration, groups, direction, serving) -> (Recalibration | None, why)

Plain functions of the stored calibration (no database): the drift check (``drift``, via
``recalibrated``) and the benchmark's replay (``bench/router_shift_watch.py``) run the same code.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from routing.router.learning.sequential import meets_sprt

MIN_LABELS = 20  # labelled answers a fit needs (admission's MIN_HELDOUT_CALLS): fewer, no change
LIMIT = 12.0  # |delta| at most (a rate moved from 0.5 to 1e-5 or 1 - 1e-5)
WORSE, BETTER = "worse", "better"
RECALIBRATED = "recalibrated"  # how the reason of a version serving recalibrated starts


@dataclass(frozen=True)
class Group:
    """Labelled student answers of one stratum: those served below ``threshold``."""

    threshold: float
    labels: int
    right: int


@dataclass(frozen=True)
class Curve:
    points: list[dict[str, Any]]  # ascending threshold
    thresholds: np.ndarray
    widths: np.ndarray  # each bin's share of calls the student answered itself
    logits: np.ndarray  # each bin's smoothed log-odds of a right answer there
    required: float
    z: float

    def index(self, threshold: float) -> int:
        """The point whose stratum a threshold serves: the highest at or below it."""
        return max(0, int(np.searchsorted(self.thresholds, threshold + 1e-12, side="right")) - 1)

    def right(self, delta: float) -> np.ndarray:
        """Per point: the share of calls right in the student's own answers below it, at ``delta``."""
        return np.cumsum(self.widths / (1.0 + np.exp(-(self.logits + delta))))

    def served(self) -> np.ndarray:
        return np.cumsum(self.widths)


def _number(value: object) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None  # type: ignore[arg-type]


def curve_of(calibration: dict[str, Any] | None) -> Curve | None:
    """The stored calibration's curve, the chosen point merged in (None: no usable curve)."""
    calibration = calibration or {}
    raw = [*(calibration.get("curve") or []), calibration.get("chosen") or {}]
    keys = ("threshold", "pass_rate", "margin", "cost_usd", "student_served_share")
    points: dict[float, dict[str, Any]] = {}
    for point in raw:
        if isinstance(point, dict) and all(_number(point.get(k)) is not None for k in keys):
            points.setdefault(float(point["threshold"]), point)
    n, required = _number(calibration.get("n")), _number(calibration.get("required_pass_rate"))
    if len(points) < 2 or not n or required is None:
        return None
    ordered = [points[t] for t in sorted(points)]
    shares = np.asarray([float(p["student_served_share"]) for p in ordered])
    rates = np.asarray([_number(p.get("student_pass_rate")) or 0.0 for p in ordered])
    served = np.maximum.accumulate(shares)
    right = np.maximum.accumulate(np.minimum(served * rates, served))
    widths = np.diff(served, prepend=0.0)
    gained = np.clip(np.diff(right, prepend=0.0), 0.0, widths)
    thresholds = np.asarray(sorted(points))
    z = _number((calibration.get("target") or {}).get("z"))
    logits = _platt(thresholds, widths * n, gained * n)
    return Curve(ordered, thresholds, widths, logits, required, 1.0 if z is None else z)


def _platt(thresholds: np.ndarray, calls: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Each bin's log-odds of a right answer, smooth in its score: a + b logit(1 - score) (the score is
    the model's odds that the call needs the teacher) fitted by maximum likelihood to the calibration
    calls' bins (a bin of one right answer is not a promise of 1.0), b at least 0."""
    from scipy.optimize import minimize

    middle = np.clip((thresholds + np.concatenate([[thresholds[0]], thresholds[:-1]])) / 2, 1e-4, 1 - 1e-4)
    x = np.log((1 - middle) / middle)
    used = calls > 0
    if not used.any():
        return np.zeros(len(thresholds))
    k, m, xs = right[used], calls[used], x[used]

    def loss(ab: np.ndarray) -> float:
        eta = ab[0] + ab[1] * xs
        return float(np.sum(m * np.logaddexp(0.0, eta) - k * eta))

    total = (float(k.sum()) + 0.5) / (float(m.sum()) + 1.0)
    start = np.asarray([math.log(total / (1 - total)), 0.0])
    found = minimize(loss, start, method="L-BFGS-B", bounds=[(-30.0, 30.0), (0.0, 10.0)])
    a, b = (float(v) for v in found.x)
    return np.asarray(a + b * x)


@dataclass(frozen=True)
class Fit:
    delta: float  # maximum likelihood
    lower: float  # its likelihood-ratio bounds at the curve's z
    upper: float
    labels: int
    right: int


def _loglik(curve: Curve, groups: list[Group], delta: float) -> float:
    right, served = curve.right(delta), curve.served()
    total = 0.0
    for group in groups:
        j = curve.index(group.threshold)
        rate = min(max(float(right[j] / served[j]) if served[j] > 0 else 0.0, 1e-12), 1 - 1e-12)
        total += group.right * math.log(rate) + (group.labels - group.right) * math.log1p(-rate)
    return total


def fit_offset(curve: Curve, groups: list[Group]) -> Fit:
    """The offset's maximum likelihood and likelihood-ratio bounds on ``groups`` (see the docstring)."""
    from scipy.optimize import brentq, minimize_scalar

    used = [g for g in groups if g.labels > 0 and curve.served()[curve.index(g.threshold)] > 0]
    labels, right = sum(g.labels for g in used), sum(g.right for g in used)
    if not used:
        return Fit(0.0, -LIMIT, LIMIT, 0, 0)

    def loss(d: float) -> float:
        return -_loglik(curve, used, d)

    best = minimize_scalar(loss, bounds=(-LIMIT, LIMIT), method="bounded", options={"xatol": 1e-6})
    delta = float(best.x)
    top = -float(best.fun)
    drop = curve.z**2 / 2.0

    def gap(d: float) -> float:
        return top - _loglik(curve, used, d) - drop

    lower = -LIMIT if gap(-LIMIT) <= 0 else float(brentq(gap, -LIMIT, delta)) if gap(delta) < 0 else delta
    upper = LIMIT if gap(LIMIT) <= 0 else float(brentq(gap, delta, LIMIT)) if gap(delta) < 0 else delta
    return Fit(delta, lower, upper, labels, right)


def moved(curve: Curve, delta: float) -> np.ndarray:
    """Per point: how much its served pass rate changes when the student's log-odds move by ``delta``."""
    return curve.right(delta) - curve.right(0.0)


def choose(curve: Curve, delta: float) -> int | None:
    """The cheapest point whose margin and pass rate, moved by the offset ``delta``, meet the target (as
    ``calibration.calibrate`` chooses; its latency check as stored); None: only the teacher does."""
    change = moved(curve, delta)
    feasible = []
    for j, point in enumerate(curve.points):
        margin, passed = float(point["margin"]) + change[j], float(point["pass_rate"]) + change[j]
        if margin >= -1e-12 and passed >= curve.required - 1e-12 and point.get("meets_latency", True):
            feasible.append((float(point["cost_usd"]), -passed, -curve.thresholds[j], j))
    if not feasible:
        return None
    j = min(feasible)[3]
    return j if curve.served()[j] > 0 else None


@dataclass(frozen=True)
class Recalibration:
    direction: str
    threshold: float
    fit: Fit
    # the chosen point as predicted now: pass_rate and student_pass_rate at the fitted offset, margin at
    # its lower bound, the rest (cost, shares, fallbacks) as calibrated
    chosen: dict[str, Any]
    reason: str

    def to_json(self, groups: list[Group]) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "threshold": self.threshold,
            "fit": asdict(self.fit),
            "chosen": self.chosen,
            "reason": self.reason,
            "groups": [asdict(g) for g in groups],
        }


def better_shown(labels: list[bool], predicted: float | None) -> bool:
    """Whether the student's answers are right more often than predicted beyond doubt, at every look
    (the mixture SPRT against the prediction), on at least ``MIN_LABELS``."""
    if predicted is None or len(labels) < MIN_LABELS:
        return False
    return meets_sprt(labels, predicted).meets


def recalibrate(
    calibration: dict[str, Any] | None, groups: list[Group], direction: str, serving: float
) -> tuple[Recalibration | None, str]:
    """The version re-fitted on ``groups`` (see the docstring): the threshold to serve at and its
    prediction, or (None, why it cannot be: too few labels, no curve, only the teacher meets the target,
    or for ``BETTER`` no cheaper threshold does). ``serving``: the threshold it serves at now."""
    labels = sum(g.labels for g in groups)
    if labels < MIN_LABELS:
        return None, f"{labels} labelled answers; a recalibration needs {MIN_LABELS}"
    curve = curve_of(calibration)
    if curve is None:
        return None, "no calibration curve stored"
    fit = fit_offset(curve, groups)
    j = choose(curve, fit.lower)
    right = sum(g.right for g in groups)
    bounds = f"log-odds offset {fit.delta:+.2f} (bounds {fit.lower:+.2f}, {fit.upper:+.2f})"
    on = f"{right} of {labels} labelled answers right: {bounds}"
    if j is None:
        return None, f"{on}; at its bound only the teacher meets the target"
    now = curve.index(serving)
    cost = float(curve.points[j]["cost_usd"])
    if direction == BETTER and cost >= float(curve.points[now]["cost_usd"]) - 1e-15:
        return None, f"{on}; no cheaper threshold meets the target at its bound"
    point = dict(curve.points[j])
    change, fitted = moved(curve, fit.lower)[j], moved(curve, fit.delta)[j]
    served = float(curve.served()[j])
    point.update(
        pass_rate=min(1.0, float(point["pass_rate"]) + fitted),
        margin=float(point["margin"]) + change,
        student_pass_rate=min(1.0, max(0.0, float(curve.right(fit.delta)[j] / served))) if served else None,
    )
    reason = (
        f"{RECALIBRATED} ({WORSE if fit.delta < 0 else BETTER} than predicted): {on}; threshold "
        f"{curve.thresholds[now]:.4f} -> "
        f"{curve.thresholds[j]:.4f}, the student's own answers predicted {point['student_pass_rate']:.3f} "
        f"on {served:.0%} of calls, served pass {point['pass_rate']:.3f}, its bound "
        f"{point['margin']:+.3f} over the target"
    )
    return Recalibration(direction, float(curve.thresholds[j]), fit, point, reason), reason
