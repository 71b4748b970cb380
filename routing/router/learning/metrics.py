"""Metrics of a routing policy on held-out calls, and RouteLLM's APGR / CPT.

APGR and CPT follow lm-sys/RouteLLM (routellm/evals/evaluate.py): routing only, no fallback. For
each threshold, x = percentage of calls sent to the strong model (here the teacher), y = accuracy
when routed calls get the teacher's answer and the rest the student's. With weak = all-student and
strong = all-teacher accuracy, APGR = (AUC(y) - AUC(weak)) / (AUC(strong) - AUC(weak)) by the
trapezoid rule over x in [0, 1]; CPT(p) = the teacher-call percentage where y first reaches
weak + p * (strong - weak) (RouteLLM interpolates the same curve with np.interp).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from routing.router.learning.calibration import PolicyData


@dataclass
class PolicyMetrics:
    name: str
    pass_rate: float
    cost_rel: float
    fallback_rate: float
    teacher_share: float
    p50_ms: float
    p95_ms: float
    precision: float
    recall: float
    f1: float
    apgr: float = float("nan")
    cpt50: float = float("nan")
    cpt80: float = float("nan")
    cost_usd: float = 0.0  # mean per call
    threshold: float | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


def routing_prf(to_teacher: np.ndarray, label: np.ndarray) -> tuple[float, float, float]:
    """Precision, recall and F1 of 'sent to the teacher up front' against 'needs the teacher'."""
    tp = float(np.sum(to_teacher & label))
    fp = float(np.sum(to_teacher & ~label))
    fn = float(np.sum(~to_teacher & label))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def routellm_curve(scores: np.ndarray, data: PolicyData) -> tuple[np.ndarray, np.ndarray]:
    """(teacher-call %, accuracy %) at every distinct threshold, from 0% to 100% teacher."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    s_sorted = np.asarray(scores, dtype=np.float64)[order]
    t_ok, s_ok = data.t_ok[order].astype(float), data.s_ok[order].astype(float)
    n = data.n
    cum_t = np.concatenate([[0.0], np.cumsum(t_ok)])
    cum_s = np.concatenate([[0.0], np.cumsum(s_ok)])
    # k calls to the teacher, only where the next score differs (ties move together)
    ks = [0] + [k for k in range(1, n) if s_sorted[k] != s_sorted[k - 1]] + [n]
    k = np.asarray(ks)
    accuracy = (cum_t[k] + cum_s[n] - cum_s[k]) / n * 100
    return k / n * 100, accuracy


def apgr(scores: np.ndarray, data: PolicyData) -> float:
    pct, acc = routellm_curve(scores, data)
    weak, strong = float(data.s_ok.mean() * 100), float(data.t_ok.mean() * 100)
    if strong == weak:
        return float("nan")
    x = pct / 100
    auc = float(np.trapezoid(acc, x))
    span = float(x[-1] - x[0])
    return (auc - weak * span) / ((strong - weak) * span)


def cpt(scores: np.ndarray, data: PolicyData, fraction: float) -> float:
    """Teacher-call percentage needed to recover ``fraction`` of the student-teacher gap."""
    pct, acc = routellm_curve(scores, data)
    weak, strong = float(data.s_ok.mean() * 100), float(data.t_ok.mean() * 100)
    if strong <= weak:
        return float("nan")
    goal = weak + fraction * (strong - weak)
    above = np.nonzero(acc >= goal - 1e-9)[0]
    if len(above) == 0:
        return float("nan")
    i = int(above[0])
    if i == 0:
        return float(pct[0])
    x0, x1, y0, y1 = pct[i - 1], pct[i], acc[i - 1], acc[i]
    return float(x0 + (goal - y0) * (x1 - x0) / (y1 - y0)) if y1 != y0 else float(x1)


def policy_metrics(
    name: str,
    data: PolicyData,
    to_teacher: np.ndarray,
    *,
    scores: np.ndarray | None = None,
    threshold: float | None = None,
    note: str = "",
) -> PolicyMetrics:
    sim = data.simulate(np.asarray(to_teacher, dtype=bool))
    teacher_cost = float(data.t_cost.sum())
    p, r, f1 = routing_prf(np.asarray(to_teacher, dtype=bool), data.label)
    p50, p95 = (float(v) for v in np.percentile(sim["latency"], [50, 95]))
    out = PolicyMetrics(
        name=name,
        pass_rate=float(sim["ok"].mean()),
        cost_rel=float(sim["cost"].sum()) / teacher_cost if teacher_cost else float("nan"),
        fallback_rate=float(sim["fallback"].mean()),
        teacher_share=float(np.mean(to_teacher)),
        p50_ms=p50,
        p95_ms=p95,
        precision=p,
        recall=r,
        f1=f1,
        cost_usd=float(sim["cost"].mean()),
        threshold=threshold,
        note=note,
    )
    if scores is not None:
        out.apgr = apgr(scores, data)
        out.cpt50 = cpt(scores, data, 0.5)
        out.cpt80 = cpt(scores, data, 0.8)
    return out


def oracle_metrics(data: PolicyData) -> PolicyMetrics:
    """Student where its answer is correct, else the teacher, up front: the lower bound on cost."""
    to_teacher = ~data.s_ok
    out = policy_metrics("oracle", data, to_teacher, scores=to_teacher.astype(float))
    # the oracle never falls back: a correct student answer is never rejected in its world
    out.pass_rate = float(np.where(to_teacher, data.t_ok, data.s_ok).mean())
    cost = np.where(to_teacher, data.t_cost, data.s_cost)
    latency = np.where(to_teacher, data.t_lat, data.s_lat)
    out.cost_usd = float(cost.mean())
    out.cost_rel = float(cost.sum() / data.t_cost.sum()) if data.t_cost.sum() else float("nan")
    out.fallback_rate = 0.0
    out.p50_ms, out.p95_ms = (float(v) for v in np.percentile(latency, [50, 95]))
    return out


def mean_metrics(name: str, runs: list[PolicyMetrics], note: str = "") -> PolicyMetrics:
    """Average of several seeded runs (the random baseline)."""
    values = {
        k: float(np.nanmean([getattr(r, k) for r in runs]))
        for k in asdict(runs[0])
        if k not in ("name", "threshold", "note")
    }
    return PolicyMetrics(name=name, note=note, threshold=None, **values)
