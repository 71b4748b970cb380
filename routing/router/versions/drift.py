"""Drift: the active version's live traffic against what calibration predicted, on truth, cost and inputs.

Live numbers come from the calls the version routed since it was activated:

- **correctness** of the answers served, on labelled calls only (``records.Outcome.label``: a teacher
  sample's comparison, a failed verification, a strong verifier's pass; the teacher's answer is the
  reference). Unknown is never passed. A call labelled by a background sample at rate r stands for 1/r
  calls. Judged by a sequential probability ratio test (Wald's SPRT on Bernoulli outcomes, at the
  weighted sample's effective size): H0 the predicted pass rate p0, H1 p0 - ``DRIFT_PASS_MARGIN`` (the
  smallest fall worth detecting, not a fixed margin on the estimate); drift when the log-likelihood
  ratio crosses log((1 - beta) / alpha), holding when it falls under log(beta / (1 - alpha)),
  *suspected* in between while it leans towards H1 (alpha = beta = 0.05). While suspected, the version's
  calls are sampled ``DRIFT_SAMPLE_BOOST`` times as often (``Decision.sample_boost``), so the test
  decides sooner; the samples record the rate they were drawn at, so their weights stay right.
- **fallback rate** (the cost of the cascade): drift when the Clopper-Pearson lower bound of the live
  rate is above the predicted one.
- **teacher share**: more than ``DRIFT_SHARE_MARGIN`` either way.
- **inputs**: the population stability index of the calls' prompt sizes (log2 buckets of prompt tokens),
  live against the calls the version learned from; drift at ``PSI_DRIFT`` and above.

A flagged version no longer routes: the learned policy serves the profile by its safe fixed fallback
(``routing.router.policies``), and the drift task enqueues a retrain (``routing.tasks``). Profiles
without an active version are served by the fixed policy whose measured quality on the newest labelled
calls meets the target (``truth.fixed_choice``), which is re-measured continuously.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.utils import timezone

from routing import conf
from routing.models import Invocation, RouterVersion
from routing.router.learning.calibration import binomial_lower, one_sided_alpha
from routing.router.learning.records import outcome_from_leg

ALPHA = BETA = 0.05
SUSPECTED = "drift suspected"  # how drift_reason starts while the test leans towards drift
PSI_DRIFT = 0.25
PSI_BUCKETS = 16


@dataclass(frozen=True)
class Sprt:
    """Wald's sequential test of p0 against p1 < p0 on (weighted) Bernoulli outcomes."""

    llr: float
    n_eff: float
    rate: float | None
    decision: str  # "drift" | "holds" | "suspected" | "undecided"

    @property
    def upper(self) -> float:
        return math.log((1 - BETA) / ALPHA)


def sprt(outcomes: list[bool], weights: list[float], p0: float, p1: float) -> Sprt:
    """The log-likelihood ratio of H1 (rate p1) over H0 (rate p0) at the weighted rate and the
    sample's effective size (Kish: (sum w)^2 / sum w^2; unweighted: n), and Wald's decision."""
    if not outcomes:
        return Sprt(0.0, 0.0, None, "undecided")
    p0, p1 = min(max(p0, 1e-6), 1 - 1e-6), min(max(p1, 1e-6), 1 - 1e-6)
    w = np.asarray(weights, dtype=np.float64)
    x = np.asarray(outcomes, dtype=np.float64)
    rate = float(np.average(x, weights=w))
    n_eff = float(w.sum() ** 2 / (w**2).sum())
    llr = n_eff * (rate * math.log(p1 / p0) + (1 - rate) * math.log((1 - p1) / (1 - p0)))
    if llr >= math.log((1 - BETA) / ALPHA):
        decision = "drift"
    elif llr <= math.log(BETA / (1 - ALPHA)):
        decision = "holds"
    else:
        decision = "suspected" if llr > 0 else "undecided"
    return Sprt(llr, n_eff, rate, decision)


def is_suspected(flag: bool, reason: str) -> bool:
    """Whether a version's last check leaned towards drift without deciding it."""
    return not flag and reason.startswith(SUSPECTED)


def psi(expected: list[float], actual: list[float], buckets: int = PSI_BUCKETS) -> float:
    """Population stability index of ``actual`` against ``expected`` on shared log2 buckets."""
    if not expected or not actual:
        return 0.0

    def shares(values: list[float]) -> np.ndarray:
        idx = np.clip(np.floor(np.log2(np.asarray(values, dtype=np.float64) + 1.0)), 0, buckets - 1)
        counts = np.bincount(idx.astype(int), minlength=buckets).astype(np.float64)
        return np.maximum(counts / counts.sum(), 1e-4)

    e, a = shares(expected), shares(actual)
    return float(np.sum((a - e) * np.log(a / e)))


def served_label(route_served: str, legs: list[dict[str, Any]]) -> tuple[bool | None, float]:
    """The served answer's label (None: unknown) and its weight (1/rate of the sample that labelled it)."""
    served = [leg for leg in legs if leg.get("role") == route_served and not leg.get("background")]
    if not served:
        return None, 1.0
    outcome = outcome_from_leg(served[-1])
    label = outcome.reference_ok if route_served == Invocation.Route.TEACHER else outcome.label
    sampled = [leg for leg in legs if leg.get("background")]
    rate = float(sampled[-1].get("sample_rate") or 1.0) if sampled else 1.0
    weight = 1.0 / max(rate, 0.01) if route_served == Invocation.Route.STUDENT and sampled else 1.0
    return label, weight


@dataclass
class Live:
    calls: int = 0
    to_teacher: int = 0
    fallbacks: int = 0
    labels: list[bool] | None = None
    weights: list[float] | None = None
    prompt_tokens: list[float] | None = None


def live_numbers(version: RouterVersion) -> Live:
    rows = Invocation.objects.filter(router_version=version)
    if version.activated_at is not None:
        rows = rows.filter(created_at__gte=version.activated_at)
    live = Live(labels=[], weights=[], prompt_tokens=[])
    assert live.labels is not None and live.weights is not None and live.prompt_tokens is not None
    for route, served_by, status, fallback, tokens, legs in rows.values_list(
        "route", "served_by", "status_code", "fallback", "prompt_tokens", "legs"
    ).iterator(chunk_size=2000):
        live.calls += 1
        live.to_teacher += route == Invocation.Route.TEACHER
        live.fallbacks += bool(fallback)
        live.prompt_tokens.append(float(tokens or 0))
        if status != 200:
            live.labels.append(False)
            live.weights.append(1.0)
            continue
        label, weight = served_label(served_by, [leg for leg in legs or [] if isinstance(leg, dict)])
        if label is not None:
            live.labels.append(label)
            live.weights.append(weight)
    return live


def _trained_on_prompt_tokens(version: RouterVersion) -> list[float]:
    rows = Invocation.objects.filter(profile_id=version.profile_id).exclude(router_version=version)
    if version.data_until is not None:
        rows = rows.filter(created_at__lte=version.data_until)
    window = conf.get().router.quality_window_calls
    return [
        float(t or 0) for t in rows.order_by("-created_at").values_list("prompt_tokens", flat=True)[:window]
    ]


def router_version_drift_check(*, version: RouterVersion) -> RouterVersion:
    """Stores the live numbers on the version and sets or clears ``drift_flag`` (left as it was while
    there are too few live calls to judge). ``drift_reason`` says what moved, or what was judged."""
    live = live_numbers(version)
    router = conf.get().router
    flag, suspected, reasons = version.drift_flag, False, []
    labels, weights = live.labels or [], live.weights or []
    pass_rate = float(np.average(labels, weights=weights)) if labels else None
    share = live.to_teacher / live.calls if live.calls else None
    if live.calls < router.drift_min_calls:
        reasons.append(f"{live.calls} live calls; drift is judged from {router.drift_min_calls}")
    else:
        found: list[str] = []
        notes: list[str] = []
        predicted_share, predicted_pass = version.predicted_teacher_share, version.predicted_pass_rate
        if (
            predicted_share is not None
            and share is not None
            and abs(share - predicted_share) > router.drift_share_margin
        ):
            found.append(
                f"teacher share {share:.3f} live vs {predicted_share:.3f} predicted "
                f"(margin {router.drift_share_margin:g})"
            )
        if predicted_pass is not None:
            test = sprt(labels, weights, predicted_pass, predicted_pass - router.drift_pass_margin)
            summary = (
                f"correctness {test.rate if test.rate is not None else float('nan'):.3f} on {len(labels)} "
                f"labelled calls vs {predicted_pass:.3f} predicted (SPRT log-LR {test.llr:+.2f}, drift at "
                f"{test.upper:.2f}: {test.decision})"
            )
            (found if test.decision == "drift" else notes).append(summary)
            suspected = test.decision == "suspected"
            if not labels:
                notes[-1] = "no labelled live calls: correctness unknown (not passed)"
        predicted_fb = ((version.calibration or {}).get("chosen") or {}).get("fallback_rate")
        if isinstance(predicted_fb, int | float) and live.calls:
            lower = float(
                binomial_lower(
                    np.asarray([live.fallbacks]), np.asarray([live.calls]), one_sided_alpha(1.645)
                )[0]
            )
            if lower > predicted_fb:
                found.append(
                    f"fallback rate {live.fallbacks / live.calls:.3f} live vs {predicted_fb:.3f} predicted "
                    f"(lower bound {lower:.3f})"
                )
        shift = psi(_trained_on_prompt_tokens(version), live.prompt_tokens or [])
        (found if shift >= PSI_DRIFT else notes).append(
            f"input shift PSI {shift:.2f} (drift at {PSI_DRIFT:g})"
        )
        flag = bool(found)
        reasons = found or ([f"{SUSPECTED}, sampling raised"] if suspected else []) + notes
    RouterVersion.objects.filter(pk=version.pk).update(
        drift_checked_at=timezone.now(),
        live_calls=live.calls,
        live_teacher_share=share,
        live_pass_rate=pass_rate,
        drift_flag=flag,
        drift_reason="; ".join(reasons)[:4000],
    )
    version.refresh_from_db()
    return version
