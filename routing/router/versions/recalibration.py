"""Recalibration on labelled samples (issue 38): a version whose prediction was wrong, on the labels of
its own answers, is re-fitted from them cheaply, in both directions, instead of only stopped, held or
retrained.

The model: the version's calibration curve (the points ``CalibrationResult.to_json`` stores, the chosen
one merged in) cuts its calibration calls into score bins, each with the share of calls the student
answered itself there and how often it was right (smoothed by half a call each way). On the traffic now,
the student's rate in every bin is moved by one log-odds offset ``delta`` (a Platt shift of slope 1):
sigmoid(logit r + delta). ``delta`` is fitted by maximum likelihood on the labelled answers, grouped by the
threshold that served them (a background sample is a uniform draw of the stratum below it). Where the
labels carry the version's score (the ledger's ``score``; ``scored_groups`` puts them in the curve's
bins), and enough of them over two bins show it (``SLOPE_LABELS``, a gain beyond the every-look bound of
one more parameter), a slope is fitted too: sigmoid(a + b logit r), Platt on the labelled answers, so a
change of slope (the student worse where the score said it was safest) is followed, not averaged away
(``fit_line``); else the offset alone. The parameters are bounded by a fall of likelihood valid at every
look of the hourly check (``fall``: the normal-mixture boundary, at the two-sided level of the target's z;
a fixed z^2 / 2 holds for one look only). Every threshold's served pass rate and its calibrated margin
(the lower confidence bound of pass - required) move by the lowest change the bounded parameters allow in
the stratum below it (``lowest_change``); the cheapest threshold whose moved margin still meets the
target serves (``choose``), predicted at the fit, so its own drift test watches the new prediction. When
only the teacher meets it, the version stops (or is held) as before.

Both directions are asked of evidence that is valid at every look: *worse* when the correctness SPRT
decided drift or leans towards it while another test found drift (the drift check's stop and hold),
*better* when the mixture SPRT (``sequential.meets_sprt``) shows the student's answers right above their
prediction (``better_shown``): a too-conservative version routes more to the student only on labels.
Fewer than ``MIN_LABELS`` labels: no change. Unknown labels are never among them.

    curve_of(calibration)                      -> Curve | None
    scored_groups(calibration, t, labels, scores) -> groups by score bin (unscored: one stratum group)
    fit_offset(curve, groups) / fit_line(curve, groups) -> Fit (offset [and slope], bounds, labels)
    lowest_change(curve, groups, fit)          -> per point, the lowest change the bounds allow
    choose(curve, change)                      -> the cheapest point meeting the target, moved
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
SLOPE_LABELS = 40  # scored labels (over two bins at least) a slope needs: fewer, the offset alone
SLOPE_MAX, SLOPE_GRID = 4.0, 33  # the slopes a line may take, and the grid its bound is searched on
PRIOR_LABELS = 10  # the normal mixture's prior, in labels (``fall``)
WORSE, BETTER = "worse", "better"
RECALIBRATED = "recalibrated"  # how the reason of a version serving recalibrated starts


@dataclass(frozen=True)
class Group:
    """Labelled student answers served below ``threshold``: a uniform draw of that stratum, or with
    ``score`` (the version's score of those calls) the answers whose score falls in one curve bin."""

    threshold: float
    labels: int
    right: int
    score: float | None = None

    def to_json(self) -> dict[str, Any]:
        found = asdict(self)
        return found if self.score is not None else {k: v for k, v in found.items() if k != "score"}


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

    def bin(self, score: float) -> int:
        """The bin a call of this score falls in: between the thresholds below and above it."""
        return min(int(np.searchsorted(self.thresholds, score, side="right")), len(self.thresholds) - 1)

    def right(self, delta: float, slope: float = 1.0) -> np.ndarray:
        """Per point: the share of calls right in the student's own answers below it, their log-odds
        at ``slope`` x the curve's + ``delta``."""
        return np.cumsum(self.widths / (1.0 + np.exp(-(slope * self.logits + delta))))

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
    delta: float  # maximum likelihood: the offset (with ``slope``, the line's intercept)
    lower: float  # the offset's bounds at the fitted slope, valid at every look (``fall``)
    upper: float
    labels: int
    right: int
    slope: float = 1.0  # on the curve's log-odds; 1.0 with ``dims`` 1: the offset alone
    dims: int = 1  # parameters fitted: 1 (the offset) or 2 (intercept and slope)


def fall(labels: int, dims: int, z: float) -> float:
    """The fall of log-likelihood from its maximum that bounds the parameters at every look: the
    normal-mixture boundary (Robbins; a prior worth ``PRIOR_LABELS`` labels) in likelihood-ratio form, at
    the two-sided level of the target's ``z``. Under the fitted model the true parameters ever leave the
    set with probability at most that level, however often the drift check re-fits (Ville's inequality),
    where a fixed z^2 / 2 holds for one look only. Wider with more parameters and, slowly, more labels."""
    alpha = math.erfc(z / math.sqrt(2.0))
    n = max(labels, 1)
    return (n + PRIOR_LABELS) / n * (math.log(1.0 / alpha) + dims / 2.0 * math.log1p(n / PRIOR_LABELS))


class _Labels:
    """Groups as arrays: strata (the serving point's index) and scored groups (their bin's index)."""

    def __init__(self, curve: Curve, groups: list[Group]) -> None:
        served = curve.served()
        strata = [g for g in groups if g.score is None and served[curve.index(g.threshold)] > 0]
        scored = [g for g in groups if g.score is not None]
        self.at = np.asarray([curve.index(g.threshold) for g in strata], dtype=int)
        self.at_n = np.asarray([g.labels for g in strata], dtype=float)
        self.at_k = np.asarray([g.right for g in strata], dtype=float)
        self.bins = np.asarray([curve.bin(float(g.score or 0.0)) for g in scored], dtype=int)
        self.bin_n = np.asarray([g.labels for g in scored], dtype=float)
        self.bin_k = np.asarray([g.right for g in scored], dtype=float)
        self.labels = int(self.at_n.sum() + self.bin_n.sum())
        self.right = int(self.at_k.sum() + self.bin_k.sum())
        self.curve, self.served = curve, served

    def loglik(self, delta: float, slope: float = 1.0) -> float:
        rates = 1.0 / (1.0 + np.exp(-(slope * self.curve.logits + delta)))
        right = np.cumsum(self.curve.widths * rates)
        p = np.concatenate([right[self.at] / self.served[self.at], rates[self.bins]])
        p = np.clip(p, 1e-12, 1 - 1e-12)
        n, k = np.concatenate([self.at_n, self.bin_n]), np.concatenate([self.at_k, self.bin_k])
        return float(np.sum(k * np.log(p) + (n - k) * np.log1p(-p)))

    def slope_known(self) -> bool:
        """Enough scored labels, over at least two bins, for a slope (else the offset alone)."""
        spread = {int(b) for b, n in zip(self.bins, self.bin_n, strict=True) if n > 0}
        return self.bin_n.sum() >= SLOPE_LABELS and len(spread) >= 2

    def best_offset(self, slope: float) -> tuple[float, float]:
        from scipy.optimize import minimize_scalar

        found = minimize_scalar(
            lambda d: -self.loglik(d, slope),
            bounds=(-LIMIT, LIMIT),
            method="bounded",
            options={"xatol": 1e-6},
        )
        return float(found.x), -float(found.fun)

    def offset_bounds(self, delta: float, slope: float, top: float, limit: float) -> tuple[float, float]:
        from scipy.optimize import brentq

        def gap(d: float) -> float:
            return top - self.loglik(d, slope) - limit

        if gap(delta) >= 0:
            return delta, delta
        lower = -LIMIT if gap(-LIMIT) <= 0 else float(brentq(gap, -LIMIT, delta))
        upper = LIMIT if gap(LIMIT) <= 0 else float(brentq(gap, delta, LIMIT))
        return lower, upper


def fit_offset(curve: Curve, groups: list[Group]) -> Fit:
    """The offset alone (slope 1): its maximum likelihood and its bounds at every look (``fall``)."""
    data = _Labels(curve, groups)
    if not data.labels:
        return Fit(0.0, -LIMIT, LIMIT, 0, 0)
    delta, top = data.best_offset(1.0)
    lower, upper = data.offset_bounds(delta, 1.0, top, fall(data.labels, 1, curve.z))
    return Fit(delta, lower, upper, data.labels, data.right)


def fit_line(curve: Curve, groups: list[Group]) -> Fit:
    """Intercept and slope on the curve's log-odds (Platt on the labelled answers' bins), where the
    scored labels allow a slope (``SLOPE_LABELS`` over two bins) and it fits better than the offset alone
    beyond the every-look bound of one more parameter (``fall``); else ``fit_offset`` (few labels, or a
    slope not shown to have changed)."""
    from scipy.optimize import minimize

    one, data = fit_offset(curve, groups), _Labels(curve, groups)
    if not data.slope_known():
        return one
    found = minimize(
        lambda ab: -data.loglik(float(ab[0]), float(ab[1])),
        np.asarray([one.delta, 1.0]),
        method="L-BFGS-B",
        bounds=[(-LIMIT, LIMIT), (0.0, SLOPE_MAX)],
    )
    delta, slope = (float(v) for v in found.x)
    top = -float(found.fun)
    if top - data.loglik(one.delta, 1.0) <= fall(data.labels, 1, curve.z):
        return one
    lower, upper = data.offset_bounds(delta, slope, top, fall(data.labels, 2, curve.z))
    return Fit(delta, lower, upper, data.labels, data.right, slope, 2)


def lowest_change(curve: Curve, groups: list[Group], fit: Fit) -> np.ndarray:
    """Per point: the lowest change of its served pass rate over the parameters the labels allow at
    every look (``fall``): the offset's lower bound, or for a line the lowest over its confidence set
    (slopes on a grid, each at its lowest intercept in the set)."""
    base = curve.right(0.0)
    if fit.dims == 1:
        return curve.right(fit.lower) - base
    data = _Labels(curve, groups)
    top, limit = data.loglik(fit.delta, fit.slope), fall(fit.labels, 2, curve.z)
    lowest = curve.right(fit.lower, fit.slope)
    for slope in np.linspace(0.0, SLOPE_MAX, SLOPE_GRID):
        delta, best = data.best_offset(float(slope))
        if top - best <= limit:
            lower, _ = data.offset_bounds(delta, float(slope), top, limit)
            lowest = np.minimum(lowest, curve.right(lower, float(slope)))
    return lowest - base


def moved(curve: Curve, delta: float, slope: float = 1.0) -> np.ndarray:
    """Per point: how much its served pass rate changes when the student's log-odds move to
    ``slope`` x theirs + ``delta``."""
    return curve.right(delta, slope) - curve.right(0.0)


def choose(curve: Curve, change: np.ndarray) -> int | None:
    """The cheapest point whose margin and pass rate, moved by ``change`` (per point), meet the target
    (as ``calibration.calibrate`` chooses; its latency check as stored); None: only the teacher does."""
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
            "groups": [g.to_json() for g in groups],
        }


def scored_groups(
    calibration: dict[str, Any] | None, threshold: float, labels: list[bool], scores: list[float | None]
) -> list[Group]:
    """The labels served below ``threshold`` as groups: those with a known score (``scores``, the first
    labels' scores; None: not known) one group per curve bin (scored at the bin's lower edge), the rest
    one stratum group. Without a curve, or with no scores, one stratum group (as before)."""
    curve = curve_of(calibration)
    known = [(bool(x), s) for x, s in zip(labels, scores, strict=False) if _number(s) is not None]
    rest = [
        bool(x) for x, s in zip(labels, [*scores, *[None] * len(labels)], strict=False) if _number(s) is None
    ]
    if curve is None or not known:
        return [Group(threshold, len(labels), sum(bool(x) for x in labels))]
    bins: dict[int, list[bool]] = {}
    for ok, score in known:
        bins.setdefault(curve.bin(float(score or 0.0)), []).append(ok)
    edges = [0.0, *(float(t) for t in curve.thresholds[:-1])]
    groups = [Group(threshold, len(oks), sum(oks), edges[b]) for b, oks in sorted(bins.items())]
    return [*groups, Group(threshold, len(rest), sum(rest))] if rest else groups


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
    fit = fit_line(curve, groups)
    lowest = lowest_change(curve, groups, fit)
    j = choose(curve, lowest)
    right = sum(g.right for g in groups)
    line = f"slope {fit.slope:.2f} and " if fit.dims == 2 else ""
    bounds = f"{line}log-odds offset {fit.delta:+.2f} (bounds {fit.lower:+.2f}, {fit.upper:+.2f})"
    on = f"{right} of {labels} labelled answers right: {bounds}"
    if j is None:
        return None, f"{on}; at its bound only the teacher meets the target"
    now = curve.index(serving)
    cost = float(curve.points[j]["cost_usd"])
    if direction == BETTER and cost >= float(curve.points[now]["cost_usd"]) - 1e-15:
        return None, f"{on}; no cheaper threshold meets the target at its bound"
    point = dict(curve.points[j])
    change, fitted = lowest[j], moved(curve, fit.delta, fit.slope)[j]
    served = float(curve.served()[j])
    point.update(
        pass_rate=min(1.0, float(point["pass_rate"]) + fitted),
        margin=float(point["margin"]) + change,
        student_pass_rate=(
            min(1.0, max(0.0, float(curve.right(fit.delta, fit.slope)[j] / served))) if served else None
        ),
    )
    way = WORSE if moved(curve, fit.delta, fit.slope)[now] < 0 else BETTER
    reason = (
        f"{RECALIBRATED} ({way} than predicted): {on}; threshold "
        f"{curve.thresholds[now]:.4f} -> "
        f"{curve.thresholds[j]:.4f}, the student's own answers predicted {point['student_pass_rate']:.3f} "
        f"on {served:.0%} of calls, served pass {point['pass_rate']:.3f}, its bound "
        f"{point['margin']:+.3f} over the target"
    )
    return Recalibration(direction, float(curve.thresholds[j]), fit, point, reason), reason
