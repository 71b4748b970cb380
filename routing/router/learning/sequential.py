"""Sequential tests and the input-shift score the drift checks use (``routing.router.versions.drift``),
as plain functions of numbers (no database): Wald's SPRT on Bernoulli outcomes (correctness, fallbacks),
a normal-mixture SPRT on a mean (cost per call), and the population stability index (prompt sizes). The
benchmarks replay them on recorded streams (``bench/router_shift.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from routing.router.learning.calibration import binomial_lower, binomial_upper, one_sided_alpha

ALPHA = BETA = 0.05
PSI_DRIFT = 0.25
PSI_BUCKETS = 16
COST_MARGIN = 0.25  # the cost test tolerates a mean cost per call up to 25% above the prediction
FALLBACK_MARGIN = 0.10  # H1 of the fallback test: 10 points more calls fall back than predicted


@dataclass(frozen=True)
class Sprt:
    """Wald's sequential test of p0 against p1 < p0 on (weighted) Bernoulli outcomes."""

    llr: float
    n_eff: float
    rate: float | None
    decision: str  # "drift" | "holds" | "suspected" | "undecided"
    alpha: float = ALPHA  # the level the upper bound is at (split between alternatives: ``sprt_either``)

    @property
    def upper(self) -> float:
        return math.log((1 - BETA) / self.alpha)


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
    return Sprt(llr, n_eff, rate, _decide(llr))


def sprt_either(outcomes: list[bool], weights: list[float], p0: float, p1s: list[float]) -> Sprt:
    """Wald's test of p0 against several alternatives at once, ``ALPHA`` split evenly between them
    (Bonferroni): drift when any one's log-LR crosses its bound at ``ALPHA / k``, holds when every one
    accepts H0. A thin alternative (a version's small slack) decides a small fall; a wide one keeps a
    large fall flagged within a few labels (one thin H1 alone takes about four times as many). The
    result is the test nearest its bound."""
    alternatives = sorted(set(p1s))
    if len(alternatives) < 2:
        return sprt(outcomes, weights, p0, alternatives[0])
    alpha = ALPHA / len(alternatives)
    tests = [sprt(outcomes, weights, p0, p1) for p1 in alternatives]
    bound = math.log((1 - BETA) / alpha)
    nearest = max(tests, key=lambda t: t.llr - bound)
    if nearest.llr >= bound:
        decision = "drift"
    elif all(t.decision == "holds" for t in tests):
        decision = "holds"
    else:
        decision = "suspected" if nearest.llr > 0 else "undecided"
    return Sprt(nearest.llr, nearest.n_eff, nearest.rate, decision, alpha)


def alternative(margin: float, slack: float | None, floor: float) -> float:
    """The fall of the whole served pass rate a correctness test's H1 names: ``margin`` (the most worth
    detecting), or the version's ``slack`` when that is smaller (its lower confidence bound of the pass
    rate minus the required one, as admitted: a fall of more than that takes it below its target, so an
    H1 beyond it would let such a fall pass unflagged), but never under ``floor`` (a fall of 0.001 would
    take tens of thousands of labels to decide). None: no slack is known, ``margin``."""
    if slack is None or not math.isfinite(slack):
        return margin
    return max(floor, min(margin, slack))


def student_sprt(
    outcomes: list[bool],
    predicted: float,
    served_share: float,
    margin: float,
    calls: int | None = None,
    *,
    wide: float | None = None,
) -> Sprt:
    """Correctness of the answers the student served itself (routed to it, not fallen back), the stratum
    a router can get wrong, against its predicted rate: Wald's SPRT, unweighted (a background sample is
    a uniform draw from that stratum, so each labelled answer is one outcome of it). The calls the
    teacher served are the reference and are left out: their correctness is the teacher's, which a
    relative target follows, and mixing them at weight 1 with samples at weight 1/rate let one sampled
    failure decide a weighted test (``bench/router_shift.py``).

    The prediction is itself an estimate: measured on ``calls`` answers, H0 is its Clopper-Pearson lower
    bound at z=1 (a rate of 0.997 on 300 answers is no promise that one failure in three is drift). H1 is
    the rate at which the whole served pass rate falls ``margin`` (``alternative``: at most the version's
    slack): H0 - ``margin / served_share``; with a ``wide`` fall larger than ``margin`` too, both at once
    (``sprt_either``), so a thin slack does not slow the flag of a large fall."""
    share = min(max(served_share, 1e-3), 1.0)
    p0 = predicted
    if calls:
        k = np.asarray([round(predicted * calls)])
        p0 = min(predicted, float(binomial_lower(k, np.asarray([calls]), one_sided_alpha(1.0))[0]))
    falls = [margin] if wide is None or wide <= margin else [margin, wide]
    return sprt_either(outcomes, [1.0] * len(outcomes), p0, [p0 - fall / share for fall in falls])


def cost_sprt(costs: list[float], predicted: float, margin: float = COST_MARGIN) -> Sprt:
    """The mean cost per call against ``predicted``, sequentially: Robbins' normal-mixture SPRT (the
    likelihood ratio of a rise mixed over N(0, predicted^2), against none; valid at every look, so a
    large rise is flagged within a few calls and a small one in more) of the mean above the tolerated
    ``predicted * (1 + margin)`` (a prediction is itself an estimate: a rise within ``margin`` is not
    drift). The variance is the live sample's, at least ``(predicted / 2)^2`` (calls' costs spread: a
    handful of equal ones is no proof). Drift when the log-LR crosses Wald's upper bound; suspected while
    the mean is above the tolerated one without that; else it holds. ``rate``: the live mean."""
    if not costs or predicted <= 0:
        return Sprt(0.0, float(len(costs)), None, "undecided")
    x = np.asarray(costs, dtype=np.float64)
    n, mean = len(x), float(x.mean())
    tolerated = predicted * (1 + margin)
    var = max(float(x.var(ddof=1)) if n > 1 else 0.0, (predicted / 2) ** 2)
    tau2 = predicted**2
    llr = -0.5 * math.log(1 + n * tau2 / var) + (n * (mean - tolerated)) ** 2 * tau2 / (
        2 * var * (var + n * tau2)
    )
    if mean <= tolerated:
        return Sprt(min(llr, 0.0), float(n), mean, "holds")
    decision = "drift" if llr >= math.log((1 - BETA) / ALPHA) else "suspected"
    return Sprt(llr, float(n), mean, decision)


def share_moved(to_teacher: int, calls: int, predicted: float, margin: float, z: float = 1.645) -> bool:
    """Whether the live teacher share is more than ``margin`` from ``predicted`` beyond doubt: its
    Clopper-Pearson interval (one-sided ``z`` each way) lies wholly outside ``predicted +- margin``."""
    if not calls:
        return False
    alpha = one_sided_alpha(z)
    k, n = np.asarray([to_teacher]), np.asarray([calls])
    lower, upper = float(binomial_lower(k, n, alpha)[0]), float(binomial_upper(k, n, alpha)[0])
    return lower > predicted + margin or upper < predicted - margin


def fallback_sprt(fallbacks: int, calls: int, predicted: float, margin: float = FALLBACK_MARGIN) -> Sprt:
    """The fallback rate against its prediction: the SPRT on "did not fall back" (H1: ``margin`` fewer)."""
    outcomes = [False] * fallbacks + [True] * (calls - fallbacks)
    test = sprt(outcomes, [1.0] * calls, 1.0 - predicted, 1.0 - predicted - margin)
    return Sprt(test.llr, test.n_eff, fallbacks / calls if calls else None, test.decision)


def _decide(llr: float) -> str:
    if llr >= math.log((1 - BETA) / ALPHA):
        return "drift"
    if llr <= math.log(BETA / (1 - ALPHA)):
        return "holds"
    return "suspected" if llr > 0 else "undecided"


def psi(expected: list[float], actual: list[float], buckets: int = PSI_BUCKETS) -> float:
    """Population stability index of ``actual`` against ``expected`` on shared log2 buckets (each
    bucket either side uses gets half a call more on both, so an empty bucket is not an infinite one)."""
    return psi_test(expected, actual, buckets)[0]


def psi_test(expected: list[float], actual: list[float], buckets: int = PSI_BUCKETS) -> tuple[float, float]:
    """(PSI, the PSI at which it is drift): ``PSI_DRIFT`` plus what sampling alone gives two samples of
    one population, the 95% point of its chi-square law (PSI ~ chi2(k - 1) x (1/n + 1/m) on k buckets
    used); 50 live calls against 500 read a PSI near 0.3 with no shift at all."""
    if not expected or not actual:
        return 0.0, PSI_DRIFT
    from scipy.stats import chi2

    def counts(values: list[float]) -> np.ndarray:
        idx = np.clip(np.floor(np.log2(np.asarray(values, dtype=np.float64) + 1.0)), 0, buckets - 1)
        return np.bincount(idx.astype(int), minlength=buckets).astype(np.float64)

    ce, ca = counts(expected), counts(actual)
    used = (ce + ca) > 0
    e, a = ce[used] + 0.5, ca[used] + 0.5
    e, a = e / e.sum(), a / a.sum()
    value = float(np.sum((a - e) * np.log(a / e)))
    k = int(used.sum())
    allowance = float(chi2.ppf(0.95, k - 1)) * (1 / len(expected) + 1 / len(actual)) if k > 1 else 0.0
    return value, PSI_DRIFT + allowance


@dataclass(frozen=True)
class Readmission:
    """A stopped version's correctness measured again (``meets_sprt``): its labelled answers since the
    stop, the rate they must beat (``floor``), the mixture log-LR against it, and whether it is beaten."""

    labels: int
    right: int
    floor: float
    llr: float
    meets: bool

    @property
    def rate(self) -> float | None:
        return self.right / self.labels if self.labels else None

    @property
    def bound(self) -> float:
        return math.log(1 / ALPHA)

    @property
    def lower(self) -> float | None:
        """The anytime-valid lower confidence bound of the rate: the highest floor these labels beat at
        ``ALPHA`` (bisection; None: no labels, 0.0: too few to show any rate above zero)."""
        if not self.labels:
            return None
        n, right, bound = self.labels, self.right, self.bound
        low, high = 0.0, right / n
        if _mixture_llr(right, n, 1e-9) < bound:
            return 0.0
        for _ in range(30):
            mid = (low + high) / 2
            low, high = (mid, high) if _mixture_llr(right, n, mid) >= bound else (low, mid)
        return low


def _mixture_llr(right: int, n: int, floor: float) -> float:
    """log of the likelihood ratio, mixed uniformly over the rates above ``floor``, of ``right`` of ``n``
    against the rate ``floor`` itself."""
    from scipy.special import betaln
    from scipy.stats import beta

    floor = min(max(floor, 1e-9), 1 - 1e-9)
    wrong = n - right
    mixed = betaln(right + 1, wrong + 1) + float(beta.logsf(floor, right + 1, wrong + 1))
    return float(mixed - math.log1p(-floor) - right * math.log(floor) - wrong * math.log1p(-floor))


def meets_sprt(outcomes: list[bool], floor: float) -> Readmission:
    """Whether a rate of correct answers is above ``floor`` beyond doubt, sequentially: H0 the rate is at
    most ``floor`` (the version would miss its target), against every rate above it mixed uniformly (no
    fixed alternative: a version right at any rate above the floor is found so, the sooner the higher).
    Under H0 the mixture likelihood ratio is a supermartingale (each rate's ratio against the floor is),
    so by Ville's inequality it ever reaches 1/``ALPHA`` with probability at most ``ALPHA``: the test may
    be looked at after every label, and never decides against the version (until it meets the floor, the
    version stays stopped)."""
    n, right = len(outcomes), int(sum(bool(x) for x in outcomes))
    if not n:
        return Readmission(0, 0, floor, 0.0, False)
    llr = _mixture_llr(right, n, floor)
    return Readmission(n, right, floor, llr, llr >= math.log(1 / ALPHA))


def readmission_floor(predicted: float, served_share: float, slack: float | None) -> float:
    """The rate of right answers the student's own stratum needs for the whole served pass rate to meet
    the target: its predicted rate less the version's ``slack`` (the lower confidence bound of its pass
    rate minus the required one) spread over that stratum's share of calls. No slack known: the
    prediction itself (never a fixed margin)."""
    share = min(max(served_share, 1e-3), 1.0)
    return min(max(predicted - max(slack or 0.0, 0.0) / share, 0.0), 1.0)
