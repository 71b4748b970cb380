"""Choosing the threshold: replay the deployed policy on a calibration shard, exactly.

Policy for a call with score s and threshold t:
  s >= t                    -> teacher answers (teacher's cost, latency and quality)
  else, student answers; when it is rejected (verifier fail, upstream error) the teacher answers
                               too: cost = student + teacher, latency = student + teacher
  a profile without verifier -> the student's answer stands, even if wrong
Quality is correctness where known, else the verdict. Of the thresholds whose pass rate meets the
target (absolute, or a share of always-teacher's on the same calls), optionally under a P95
latency bound, the one with the lowest expected cost wins.

``z`` > 0 asks the target of a one-sided confidence bound at that normal quantile (z=1: 84%)
instead of the point estimate, sized to the calibration set, so that a small set gets a larger
margin. A relative target compares the policy with always-teacher on the same calls: it loses where
the teacher passed and its answer did not (b calls) and gains where the reverse holds (c); both
happen only on the m calls it leaves to the student, so the margin is (1 - target) x teacher pass
rate + m/n x (lower bound of (c - b)/m). That bound is of a paired difference (MOVER: the
exact Clopper-Pearson distances of c/m and b/m combined as variances are), not the lower bound of
c/m minus the upper bound of b/m: bounding the two separately asks both to fail at once, so it holds
at far more than the stated confidence and wastes about 30% of the margin. Always-teacher (m = 0)
meets a relative target by definition. An absolute target needs the exact (Clopper-Pearson) lower bound of
the pass rate itself. The latency bound uses an upper confidence bound of the P95 (an order
statistic).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from routing.router.learning.records import ReplayRecord

# --- confidence bounds --------------------------------------------------------------------------------


def one_sided_alpha(z: float) -> float:
    """The error rate of a one-sided bound at normal quantile ``z`` (z=1: 0.159)."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def binomial_lower(k: np.ndarray, n: np.ndarray, alpha: float) -> np.ndarray:
    """Clopper-Pearson one-sided lower bound of a rate (0 where k = 0 or n = 0)."""
    from scipy.stats import beta

    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    bound = np.where(k > 0, beta.ppf(alpha, np.maximum(k, 1e-12), n - k + 1.0), 0.0)
    return np.where(n > 0, bound, 0.0)


def binomial_upper(k: np.ndarray, n: np.ndarray, alpha: float) -> np.ndarray:
    """Clopper-Pearson one-sided upper bound of a rate: k successes in n trials (0 where n = 0)."""
    from scipy.stats import beta

    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    safe = np.maximum(n, 1.0)
    bound = np.where(k >= n, 1.0, beta.ppf(1.0 - alpha, k + 1.0, np.maximum(safe - k, 1e-12)))
    return np.where(n > 0, bound, 0.0)


def paired_difference_lower(losses: np.ndarray, gains: np.ndarray, m: np.ndarray, alpha: float) -> np.ndarray:
    """One-sided lower bound, at error rate ``alpha``, of (gains - losses) / m: m paired calls, of which
    ``losses`` fail where the reference passed and ``gains`` the reverse (0 where m = 0).

    MOVER (Zou and Donner 2008): the distances from each rate to its own exact (Clopper-Pearson) bound
    are combined as variances are, sqrt(dc^2 + db^2 - 2 r dc db), with r the two rates' multinomial
    correlation, instead of added. Small counts keep the exact bounds' asymmetry; where both kinds
    occur the margin is about 30% narrower than the two bounds' plain difference, which holds only
    when both fail at once and so at far more than the stated confidence."""
    b, c = np.asarray(losses, dtype=np.float64), np.asarray(gains, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    safe = np.maximum(m, 1.0)
    pb, pc = b / safe, c / safe
    db = binomial_upper(b, m, alpha) - pb
    dc = pc - binomial_lower(c, m, alpha)
    r = -np.sqrt(pb * pc / np.maximum((1.0 - pb) * (1.0 - pc), 1e-12))
    width = np.sqrt(np.maximum(dc**2 + db**2 - 2.0 * r * dc * db, 0.0))
    return np.where(m > 0, pc - pb - width, 0.0)


def quality_margins(
    *,
    n: int,
    k: np.ndarray,
    losses: np.ndarray,
    gains: np.ndarray,
    passed: np.ndarray,
    teacher_rate: float,
    target: Target,
) -> np.ndarray:
    """Per threshold (``k`` calls to the teacher up front; of the n - k left to the student,
    ``losses`` fail where the teacher passed, ``gains`` pass where it failed; ``passed`` calls in
    all): the confidence bound of (pass rate - required), >= 0 where the target is met."""
    m = n - np.asarray(k, dtype=np.float64)
    if target.relative:
        slack = (1.0 - target.pass_rate) * teacher_rate
        if target.z <= 0:
            return slack + (gains - losses) / n
        return slack + m / n * paired_difference_lower(losses, gains, m, one_sided_alpha(target.z))
    if target.z <= 0:
        return passed / n - target.pass_rate
    return (
        binomial_lower(passed, np.full(len(passed), float(n)), one_sided_alpha(target.z)) - target.pass_rate
    )


# --- shards ---------------------------------------------------------------------------------------


def shard_of(task_id: str, n_shards: int = 5) -> int:
    return int(hashlib.sha1(task_id.encode()).hexdigest()[:8], 16) % n_shards


@dataclass(frozen=True)
class Split:
    n_shards: int = 5
    train: tuple[int, ...] = (0, 1, 2, 3)
    calibrate: tuple[int, ...] = (4,)
    test: tuple[int, ...] = ()

    def parts(
        self, records: Sequence[ReplayRecord]
    ) -> tuple[list[ReplayRecord], list[ReplayRecord], list[ReplayRecord]]:
        out: tuple[list[ReplayRecord], list[ReplayRecord], list[ReplayRecord]] = ([], [], [])
        for record in records:
            shard = shard_of(record.task_id, self.n_shards)
            for part, shards in zip(out, (self.train, self.calibrate, self.test), strict=True):
                if shard in shards:
                    part.append(record)
        return out


EVAL_SPLIT = Split(train=(0, 1, 2), calibrate=(3,), test=(4,))

# --- the policy -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyData:
    """Per-call arrays of complete records (both legs known)."""

    s_ok: np.ndarray
    t_ok: np.ndarray
    s_cost: np.ndarray
    t_cost: np.ndarray
    s_lat: np.ndarray
    t_lat: np.ndarray
    falls_back: np.ndarray  # the gateway would run the teacher after the student
    label: np.ndarray  # needs the teacher

    @property
    def n(self) -> int:
        return len(self.s_ok)

    @classmethod
    def from_records(cls, records: Sequence[ReplayRecord]) -> PolicyData:
        rows = []
        for r in records:
            if r.student is None or r.teacher is None:
                raise ValueError(f"record {r.id} lacks a leg; replay needs both (filter on .complete)")
            fb = r.student.verdict == "error" or (r.has_verifier and r.student.verdict == "fail")
            rows.append(
                (
                    r.student.ok,
                    r.teacher.reference_ok,
                    r.student.cost_usd,
                    r.teacher.cost_usd,
                    r.student.latency_ms,
                    r.teacher.latency_ms,
                    fb,
                    bool(r.needs_teacher),
                )
            )
        cols = list(zip(*rows, strict=True)) if rows else [()] * 8
        b = [np.asarray(c, dtype=bool) for c in (cols[0], cols[1], cols[6], cols[7])]
        f = [np.asarray(c, dtype=np.float64) for c in cols[2:6]]
        return cls(b[0], b[1], f[0], f[1], f[2], f[3], b[2], b[3])

    def student_path(self, *, fallback: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ok, cost, latency, fell back) of each call when it is routed to the student."""
        fb = self.falls_back if fallback else np.zeros(self.n, dtype=bool)
        ok = np.where(fb, self.t_ok, self.s_ok)
        cost = self.s_cost + np.where(fb, self.t_cost, 0.0)
        lat = self.s_lat + np.where(fb, self.t_lat, 0.0)
        return ok, cost, lat, fb

    def simulate(self, to_teacher: np.ndarray, *, fallback: bool = True) -> dict[str, np.ndarray]:
        ok, cost, lat, fb = self.student_path(fallback=fallback)
        return {
            "ok": np.where(to_teacher, self.t_ok, ok),
            "cost": np.where(to_teacher, self.t_cost, cost),
            "latency": np.where(to_teacher, self.t_lat, lat),
            "fallback": ~to_teacher & fb,
        }


@dataclass(frozen=True)
class Target:
    pass_rate: float = 0.98
    relative: bool = True  # a share of always-teacher's pass rate on the same calls
    max_p95_ms: float | None = None
    z: float = 1.0  # one-sided confidence (1.0 ~ 84%); 0 = point estimate

    def required(self, teacher_pass_rate: float) -> float:
        return self.pass_rate * teacher_pass_rate if self.relative else self.pass_rate

    def describe(self) -> str:
        text = f"{self.pass_rate:g}x always-teacher" if self.relative else f"pass rate {self.pass_rate:g}"
        if self.max_p95_ms is not None:
            text += f", P95 <= {self.max_p95_ms:g} ms"
        return text

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Target:
        return cls(**data)


@dataclass(frozen=True)
class CurvePoint:
    threshold: float
    pass_rate: float
    margin: float  # lower confidence bound of (pass - required); >= 0 meets the quality target
    cost_usd: float  # mean per call
    cost_rel: float  # vs always-teacher
    teacher_share: float  # routed to the teacher up front
    fallback_rate: float
    p50_ms: float
    p95_ms: float
    p95_bound_ms: float  # upper confidence bound of the P95 (order statistic at z); checked against the bound
    meets_quality: bool
    meets_latency: bool
    # the calls the student answered itself (routed to it, no fallback) and how often it was right there:
    # what the drift check's correctness test watches (sequential.student_sprt)
    student_served_share: float | None = None
    student_pass_rate: float | None = None

    @property
    def meets(self) -> bool:
        return self.meets_quality and self.meets_latency


@dataclass
class CalibrationResult:
    target: Target
    threshold: float
    chosen: CurvePoint
    met: bool
    reason: str
    required_pass_rate: float
    teacher_pass_rate: float
    n: int
    curve: list[CurvePoint] = field(repr=False, default_factory=list)

    def to_json(self, *, max_points: int = 200) -> dict[str, Any]:
        step = max(1, math.ceil(len(self.curve) / max_points))
        points = self.curve[::step]
        if self.curve and points[-1] is not self.curve[-1]:
            points.append(self.curve[-1])
        return {
            "target": self.target.to_json(),
            "threshold": self.threshold,
            "chosen": asdict(self.chosen),
            "met": self.met,
            "reason": self.reason,
            "required_pass_rate": self.required_pass_rate,
            "teacher_pass_rate": self.teacher_pass_rate,
            "n": self.n,
            "curve": [asdict(p) for p in points],
        }


def candidate_thresholds(scores: np.ndarray, *, max_candidates: int = 4000) -> np.ndarray:
    """One threshold per distinct partition of the calls (midpoints between distinct scores),
    from 'never the teacher' down to 'always the teacher'."""
    u = np.unique(scores)[::-1]
    if len(u) == 0:
        return np.asarray([0.0])
    never = max(1.0, float(u[0])) + 1e-6
    middles = (u[:-1] + u[1:]) / 2.0
    if len(middles) > max_candidates:
        middles = middles[np.linspace(0, len(middles) - 1, max_candidates).round().astype(int)]
    return np.concatenate([[never], middles, [min(0.0, float(u[-1]))]])


def sweep(
    data: PolicyData, scores: np.ndarray, target: Target, *, fallback: bool = True, max_candidates: int = 4000
) -> list[CurvePoint]:
    scores = np.asarray(scores, dtype=np.float64)
    if data.n == 0:
        raise ValueError("no complete records to calibrate on")
    thresholds = candidate_thresholds(scores, max_candidates=max_candidates)
    order = np.argsort(-scores, kind="stable")
    sorted_scores = scores[order]
    sp_ok, sp_cost, sp_lat, sp_fb = (a[order] for a in data.student_path(fallback=fallback))
    t_ok, t_cost, t_lat = data.t_ok[order], data.t_cost[order], data.t_lat[order]
    teacher_rate = float(data.t_ok.mean())
    loss = t_ok & ~sp_ok  # left to the student, the policy fails where the teacher passed
    gain = ~t_ok & sp_ok

    def cum(a: np.ndarray) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(a, dtype=np.float64)])

    c = {
        k: cum(v)
        for k, v in {
            "t_ok": t_ok,
            "s_ok": sp_ok,
            "t_cost": t_cost,
            "s_cost": sp_cost,
            "fb": sp_fb,
            "loss": loss,
            "gain": gain,
            "served": ~sp_fb,
            "served_ok": sp_ok & ~sp_fb,
        }.items()
    }
    n, total_teacher = data.n, float(data.t_cost.sum())
    ranks = np.arange(n)
    # The P95's upper confidence bound: the order statistic k with k/n = 0.95 + z*sqrt(0.95*0.05/n).
    q_ucb = min(100.0, 95.0 + 100.0 * target.z * math.sqrt(0.95 * 0.05 / n))
    ks = np.searchsorted(-sorted_scores, -thresholds, side="right")  # calls with score >= t
    passed = c["t_ok"][ks] + c["s_ok"][n] - c["s_ok"][ks]
    margins = quality_margins(
        n=n,
        k=ks,
        losses=c["loss"][n] - c["loss"][ks],
        gains=c["gain"][n] - c["gain"][ks],
        passed=passed,
        teacher_rate=teacher_rate,
        target=target,
    )
    required = target.required(teacher_rate)
    points = []
    for t, k, ok, margin in zip(thresholds, ks, passed, margins, strict=True):
        cost = float(c["t_cost"][k] + c["s_cost"][n] - c["s_cost"][k])
        latency = np.where(ranks < k, t_lat, sp_lat)
        p50, p95, p95_ucb = (float(v) for v in np.percentile(latency, [50, 95, q_ucb]))
        pass_rate = float(ok) / n
        served = float(c["served"][n] - c["served"][k])
        served_ok = float(c["served_ok"][n] - c["served_ok"][k])
        points.append(
            CurvePoint(
                threshold=float(t),
                pass_rate=pass_rate,
                margin=float(margin),
                cost_usd=cost / n,
                cost_rel=cost / total_teacher if total_teacher > 0 else float("nan"),
                teacher_share=int(k) / n,
                fallback_rate=float(c["fb"][n] - c["fb"][k]) / n,
                p50_ms=p50,
                p95_ms=p95,
                p95_bound_ms=p95_ucb,
                meets_quality=bool(margin >= -1e-12 and pass_rate >= required - 1e-12),
                meets_latency=bool(target.max_p95_ms is None or p95_ucb <= target.max_p95_ms),
                student_served_share=served / n,
                student_pass_rate=served_ok / served if served else None,
            )
        )
    return points


def calibrate(
    data: PolicyData, scores: np.ndarray, target: Target, *, fallback: bool = True, max_candidates: int = 4000
) -> CalibrationResult:
    """The cheapest threshold meeting ``target`` on these calls, with the whole curve."""
    curve = sweep(data, scores, target, fallback=fallback, max_candidates=max_candidates)
    teacher_rate = float(data.t_ok.mean())
    required = target.required(teacher_rate)
    feasible = [p for p in curve if p.meets]
    if feasible:
        chosen = min(feasible, key=lambda p: (p.cost_usd, -p.pass_rate, -p.threshold))
        reason = (
            f"cheapest threshold meeting {target.describe()}: pass {chosen.pass_rate:.3f} "
            f">= {required:.3f}, cost {chosen.cost_rel:.3f}x always-teacher"
        )
        met = True
    else:
        chosen = curve[-1]  # always the teacher
        best = max(curve, key=lambda p: p.pass_rate)
        why = [
            f"no threshold meets {target.describe()} (needs pass {required:.3f}; best {best.pass_rate:.3f})"
        ]
        if target.max_p95_ms is not None and not chosen.meets_latency:
            why.append(f"even always-teacher has P95 {chosen.p95_ms:.0f} ms")
        reason = "; ".join(why) + ": always the teacher"
        met = False
    return CalibrationResult(
        target, chosen.threshold, chosen, met, reason, required, teacher_rate, data.n, curve
    )
