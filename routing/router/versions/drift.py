"""Drift: the active version's live traffic against what calibration predicted, on truth, cost and inputs.

Live numbers come from the calls the version routed since it was activated:

- **correctness** of the answers the student served itself (routed to it, not fallen back), on labelled
  calls only (``records.Outcome.label``: a teacher sample's comparison, a strong verifier's pass; the
  teacher's answer is the reference). Unknown is never passed. Judged by a sequential probability
  ratio test (``sequential.student_sprt``: Wald's SPRT on those answers, unweighted, since a background
  sample is a uniform draw of them): H0 their predicted rate q0 (calibration's ``student_pass_rate``),
  H1 the rate at which the whole served pass rate falls by the alternative d (q0 - d / their share of
  calls: the smallest fall worth detecting, not a fixed margin on the estimate). d is
  ``DRIFT_PASS_MARGIN``, or the version's slack when that is smaller (``slack_of``: the lower confidence
  bound of its pass rate minus the required one it was admitted on; a fall beyond it misses the target),
  at least ``DRIFT_PASS_FLOOR`` (``sequential.alternative``); drift when
  the log-likelihood ratio crosses log((1 - beta) / alpha), holding when it falls under
  log(beta / (1 - alpha)), *suspected* in between while it leans towards H1 (alpha = beta = 0.05).
  The teacher's answers are left out (their correctness is the teacher's). A version calibrated
  before that prediction was stored is judged on every labelled call (a sample at rate r weighted
  1/r, the SPRT at the weighted sample's effective size). While suspected (or while
  cost or inputs drifted and it still routes), the version's calls are sampled ``DRIFT_SAMPLE_BOOST``
  times as often (``Decision.sample_boost``), so the test
  decides sooner; the samples record the rate they were drawn at, so their weights stay right.
- **cost**, sequentially like correctness: the **fallback rate** by the same SPRT on "no fallback"
  (H1: ``FALLBACK_MARGIN`` more fallbacks than predicted), and the **cost per call** by a normal-mixture
  SPRT on its mean (``cost_sprt``: valid at every look; suspected while ``COST_MARGIN`` above).
- **teacher share**: more than ``DRIFT_SHARE_MARGIN`` either way, beyond its Clopper-Pearson interval.
- **inputs**: the population stability index of the calls' prompt sizes (log2 buckets of prompt tokens),
  live against the calls the version learned from; drift at ``PSI_DRIFT`` plus what sampling alone
  gives two samples of one population (``sequential.psi_test``).

Drift of correctness flags the version (``drift_flag``): it no longer routes, the learned policy serves
the profile by its safe fixed fallback (``routing.router.policies``), and the drift task enqueues a
retrain (``routing.tasks``); meanwhile the stopped version is measured again on the answers it would have
served and re-admitted when they meet the target (``readmission``). Drift of cost, teacher share or inputs
alone (``COST_DRIFT``) enqueues a retrain and is alerted, and the version keeps routing while its
correctness test holds or is undecided (``ROUTING``): its answers are still as correct as predicted, and
the teacher would cost more still. While that test leans towards drift undecided (*suspected*), another
signal on the same traffic is not left to chance (``HELD``, ``Judgement.hold``; that drift stands from the
check that found it until a retrain replaces the version, ``latched``): the profile is served by its safe
fixed policy, as if flagged, until the correctness test accepts H0 (labels of calls before the hold still
arrive) or a retrain is admitted; the decision's reason says so (``routing.router.policies``). While held,
the version is measured again on the student answers background samples label on the calls the safe policy
serves (sampling raised), those it would have served itself (``held_labels``). Profiles without an active
version are served by the fixed policy whose measured quality on labelled calls meets the target
(``truth.fixed_choice``), and are watched by the same tests against that policy's measured baseline
(``profile_drift``). Every newly flagged drift is alerted (``routing.router.alerts``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from django.db.models import QuerySet
from django.utils import timezone

from core.money import money_display
from routing import conf
from routing.models import Invocation, ProfileDrift, RouterVersion
from routing.router.learning.records import outcome_from_leg
from routing.router.learning.sequential import (
    PSI_DRIFT,
    Sprt,
    alternative,
    cost_sprt,
    fallback_sprt,
    psi_test,
    share_moved,
    sprt_either,
    student_sprt,
)
from routing.router.versions.config import labelling
from routing.router.versions.held import held_labels
from routing.router.versions.input_shift import INPUTS, blind, slow_labels
from routing.router.versions.readmission import stopped_again
from routing.router.versions.recalibration import BETTER, RECALIBRATED, WORSE, better_shown
from routing.router.versions.refit import refitted, serving_point

SUSPECTED = "drift suspected"  # how drift_reason starts while the test leans towards drift
# how it starts when cost, teacher share or inputs drifted (retrain queued, alerted)
COST_DRIFT = "drift on cost or inputs"
# ... and correctness is not in doubt: the version still routes
ROUTING = f"{COST_DRIFT}, correctness holds (still routing; retrain queued)"
# ... and correctness is suspected: the safe fixed policy serves until the test accepts H0 or a retrain
HELD = f"{COST_DRIFT}, correctness suspected (the safe fixed policy serves; retrain queued)"
# ... on inputs unlike the calibration calls where labels come slowly (``input_shift``): held alike
BLIND = f"{COST_DRIFT}, new inputs where labels come slowly (the safe fixed policy serves; retrain queued)"
# how it starts while the version's student answers have fewer labels than ``LABEL_BUDGET`` since it was
# activated, and nothing else is in doubt: sampled as if suspected, so the correctness test gets evidence
LABELS_WANTED = "labels wanted"


def labels_wanted(labelled: int, budget: int) -> str:
    """The reason of a version whose student answers carry ``labelled`` labels, fewer than ``budget``."""
    return f"{LABELS_WANTED} ({labelled} of {budget} student answers labelled), sampling raised"


def is_cost_drift(flag: bool, reason: str) -> bool:
    """Whether a version's last check found drift on cost or inputs, not decided on correctness (a
    retrain is queued; it still routes, or its safe fixed policy serves while correctness is suspected)."""
    return not flag and reason.startswith(COST_DRIFT)


def is_held(flag: bool, reason: str) -> bool:
    """Whether a version's last check found drift of cost, teacher share or inputs while its correctness
    test leaned towards drift undecided: the profile's safe fixed policy serves instead of it."""
    return not flag and reason.startswith((HELD, BLIND))


def is_suspected(flag: bool, reason: str) -> bool:
    """Whether a version's answers are sampled more: its last check leaned towards drift without
    deciding it, or found drift of cost, teacher share or inputs while it still routes (its correctness
    is then in doubt until the retrain; ``bench/router_shift.py`` boosts the same way), or too few of its
    student answers are labelled yet (``LABELS_WANTED``, the ``LABEL_BUDGET``)."""
    return not flag and reason.startswith((SUSPECTED, COST_DRIFT, LABELS_WANTED))


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
    labels: list[bool] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    prompt_tokens: list[float] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    # labels of the answers the student served itself (unweighted: samples are uniform draws of them)
    student_labels: list[bool] = field(default_factory=list)
    student_scores: list[float | None] = field(default_factory=list)  # the router's, of those labels
    student_served: int = 0

    @property
    def pass_rate(self) -> float | None:
        return float(np.average(self.labels, weights=self.weights)) if self.labels else None

    @property
    def teacher_share(self) -> float | None:
        return self.to_teacher / self.calls if self.calls else None


def live_from(rows: QuerySet[Invocation]) -> Live:
    """The live numbers of ``rows`` (the gateway's calls: the learning key's rows are left out)."""
    live = Live()
    for route, served_by, status, fallback, tokens, cost, legs, score in (
        rows.exclude(policy="learning")
        .values_list(
            "route", "served_by", "status_code", "fallback", "prompt_tokens", "cost_usd", "legs", "score"
        )
        .iterator(chunk_size=2000)
    ):
        live.calls += 1
        live.to_teacher += route == Invocation.Route.TEACHER
        live.fallbacks += bool(fallback)
        live.prompt_tokens.append(float(tokens or 0))
        live.costs.append(float(cost or 0))
        by_student = served_by == Invocation.Route.STUDENT
        live.student_served += by_student
        legs = [leg for leg in legs or [] if isinstance(leg, dict)]
        label, weight = (False, 1.0) if status != 200 else served_label(served_by, legs)
        if label is not None:
            live.labels.append(label)
            live.weights.append(weight)
            if by_student:
                live.student_labels.append(label)
                live.student_scores.append(score)
    return live


def live_numbers(version: RouterVersion, since: datetime | None = None) -> Live:
    rows = Invocation.objects.filter(router_version=version)
    for start in (version.activated_at, since):
        rows = rows if start is None else rows.filter(created_at__gte=start)
    return live_from(rows)


@dataclass(frozen=True)
class Predicted:
    """What the live traffic is held against: a version's calibration, or a fixed policy's baseline."""

    pass_rate: float | None = None
    cost_usd: float | None = None
    fallback_rate: float | None = None
    teacher_share: float | None = None
    prompt_tokens: tuple[float, ...] = ()
    what: str = "predicted"
    # the answers the student served itself: their share of calls and how often they were right
    student_share: float | None = None
    student_pass_rate: float | None = None
    student_calls: int | None = None  # the answers ``student_pass_rate`` was measured on
    # how far the pass rate may fall before it misses the target (``slack_of``); None: not known
    slack: float | None = None
    slow_labels: bool = False  # no strong verifier: inputs that drift hold it (``input_shift``)


@dataclass(frozen=True)
class Judgement:
    flag: bool  # some test decided drift
    suspected: bool
    reasons: list[str]
    stop: bool = False  # correctness drifted: the version (or the fallback) must stop serving
    # correctness suspected (its SPRT leaning towards drift, undecided) while another test found drift:
    # the safe fixed policy serves until the correctness test accepts H0 or a retrain is admitted
    hold: bool = False

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)[:4000]


def latched(reason: str) -> str:
    """The drift of cost, teacher share or inputs a version's last check found ("": none). It stays
    found until a retrain replaces the version (the retrain it queued is the answer to it), so that a
    correctness test leaning towards drift later is held against it (``HELD``)."""
    if not reason.startswith(COST_DRIFT) or ": " not in reason:
        return ""
    return reason.split(": ", 1)[1].split("; ")[0].removesuffix(EARLIER)


EARLIER = " (found at an earlier check)"


def _held_as(
    p: Predicted, leaning: list[str], held: bool, accepted: bool, found: list[str], earlier: str
) -> str:
    """How a check that found (or still has) drift of cost, teacher share, fallbacks or inputs begins:
    held while correctness leans towards drift (or was held and is not yet accepted), held for inputs
    unlike calibration's where labels come slowly (``input_shift.blind``), else the version routes."""
    if blind(p.slow_labels, found, earlier, accepted) and "correctness" not in leaning:
        return BLIND
    return HELD if "correctness" in leaning or (held and not accepted) else ROUTING


def judge_live(
    live: Live,
    predicted: Predicted,
    earlier: str = "",
    held: bool = False,
    new_labels: list[bool] | None = None,
) -> Judgement:
    """Each test of the module docstring on ``live`` against ``predicted``; drift when one decides it,
    suspected when none does and a sequential test leans towards it. ``earlier``: a drift of cost,
    teacher share or inputs an earlier check found (``latched``), still standing; ``held``: the last
    check held the version; ``new_labels``: the student's labels since the input shift began (None: those
    of ``live``), the only ones that release an input-shift hold (``input_shift``)."""
    router = conf.get().router
    found: list[str] = []
    notes: list[str] = []
    leaning: list[str] = []
    what = predicted.what
    share = live.teacher_share
    expected_share = predicted.teacher_share
    if (
        share is not None
        and expected_share is not None
        and share_moved(live.to_teacher, live.calls, expected_share, router.drift_share_margin)
    ):
        found.append(
            f"teacher share {share:.3f} live vs {predicted.teacher_share:.3f} {what} "
            f"(margin {router.drift_share_margin:g})"
        )
    tests: list[tuple[str, Sprt, str]] = []
    new: Sprt | None = None  # the correctness test on ``new_labels``
    accepted = False  # the correctness test accepted H0
    q0, share = predicted.student_pass_rate, predicted.student_share
    labels = live.student_labels if q0 is not None and share else live.labels
    fall = alternative(router.drift_pass_margin, predicted.slack, router.drift_pass_floor)
    slack = f" (slack {predicted.slack:+.3f})" if predicted.slack is not None else ""
    wider = f" or {router.drift_pass_margin:g} (alpha split)" if fall < router.drift_pass_margin else ""
    h1 = f", H1 a fall of {fall:.3f}{slack}{wider}"
    if q0 is not None and share:
        margin = router.drift_pass_margin
        test = student_sprt(live.student_labels, q0, share, fall, predicted.student_calls, wide=margin)
        new = student_sprt(new_labels or [], q0, share, fall, predicted.student_calls, wide=margin)
        tests.append(("correctness", test, f"{q0:.3f} (the student's own answers, {share:.0%} of calls{h1})"))
    elif predicted.pass_rate is not None:
        p0 = predicted.pass_rate
        falls = [p0 - fall, p0 - router.drift_pass_margin]
        tests.append(
            ("correctness", sprt_either(live.labels, live.weights, p0, falls), f"{p0:.3f} ({h1[2:]})")
        )
        new = sprt_either(new_labels or [], [1.0] * len(new_labels or []), p0, falls)
    if predicted.cost_usd is not None and predicted.cost_usd > 0:
        tests.append(
            ("cost per call", cost_sprt(live.costs, predicted.cost_usd), money_display(predicted.cost_usd))
        )
    if predicted.fallback_rate is not None and live.calls:
        fb = predicted.fallback_rate
        tests.append(("fallback rate", fallback_sprt(live.fallbacks, live.calls, fb), f"{fb:.3f}"))
    for name, test, expected in tests:
        if name == "correctness" and not labels:
            notes.append("no labelled live calls: correctness unknown (not passed)")
            continue
        value = money_display(test.rate) if name == "cost per call" else f"{test.rate:.3f}"
        on = f" on {len(labels)} labelled calls" if name == "correctness" else ""
        summary = (
            f"{name} {value}{on} vs {expected} {what} (SPRT log-LR {test.llr:+.2f}, drift at "
            f"{test.upper:.2f}: {test.decision})"
        )
        (found if test.decision == "drift" else notes).append(summary)
        if test.decision == "suspected":
            leaning.append(name)
        if name == "correctness":
            accepted = test.decision == "holds"
    shift, drift_at = psi_test(list(predicted.prompt_tokens), live.prompt_tokens)
    (found if shift >= drift_at else notes).append(
        f"input shift PSI {shift:.2f} (drift at {drift_at:.2f}: {PSI_DRIFT:g} plus what sampling alone gives)"
    )
    if blind(predicted.slow_labels, found, earlier, False):  # released on the new inputs' labels only
        ok = accepted if new_labels is None else new is not None and new.decision == "holds"
        accepted = ok and (held or earlier.startswith(INPUTS))  # found only now: no label after it yet
    if found:
        stop = any(reason.startswith("correctness") for reason in found)
        if stop:
            return Judgement(True, False, found, True)
        begins = _held_as(predicted, leaning, held, accepted, found, earlier)
        found.sort(key=lambda r: begins == BLIND and not r.startswith(INPUTS))  # what ``latched`` keeps
        return Judgement(
            True, begins != ROUTING, [f"{begins}: {found[0]}", *found[1:], *notes], hold=begins != ROUTING
        )
    if earlier:  # held: until the correctness test accepts H0 (or a retrain replaces the version)
        begins = _held_as(predicted, leaning, held, accepted, [], earlier)
        return Judgement(
            True, begins != ROUTING, [f"{begins}: {earlier}{EARLIER}", *notes], hold=begins != ROUTING
        )
    head = [f"{SUSPECTED} ({', '.join(leaning)}), sampling raised"] if leaning else []
    return Judgement(False, bool(leaning), head + notes)


def _trained_on_prompt_tokens(version: RouterVersion) -> list[float]:
    rows = Invocation.objects.filter(profile_id=version.profile_id).exclude(router_version=version)
    if version.data_until is not None:
        rows = rows.filter(created_at__lte=version.data_until)
    window = conf.get().router.quality_window_calls
    return [
        float(t or 0) for t in rows.order_by("-created_at").values_list("prompt_tokens", flat=True)[:window]
    ]


def slack_of(version: RouterVersion) -> float | None:
    """How far ``version``'s pass rate may fall before it misses its target: the lower confidence bound
    of (pass rate - required) it was admitted on, calibration's at its threshold and, admitted on the
    traffic since a drift, the one on those calls (``admission.Recent.margin``); the smaller of those
    stored. None: neither is (the correctness test's H1 is then ``DRIFT_PASS_MARGIN``)."""
    chosen = (version.calibration or {}).get("chosen") or {}
    recent = (version.admission or {}).get("recent") or {}
    margins = [
        float(m)
        for m in (chosen.get("margin"), recent.get("margin"))
        if isinstance(m, int | float) and not isinstance(m, bool) and math.isfinite(m)
    ]
    return min(margins) if margins else None


def predicted_by(version: RouterVersion) -> Predicted:
    """What the version's live traffic is held against: its chosen point, or where it serves
    recalibrated (``refit.serving_point``) the recalibrated one, its margin the slack."""
    chosen = serving_point(version)
    again = "measured_on" in chosen
    cost, fallback = chosen.get("cost_usd"), chosen.get("fallback_rate")
    share, student = chosen.get("student_served_share"), chosen.get("student_pass_rate")
    calibrated = (version.calibration or {}).get("n") or 0
    calls = round(float(share) * int(calibrated)) if isinstance(share, int | float) else None
    margin = chosen.get("margin")
    return Predicted(
        pass_rate=float(chosen["pass_rate"]) if again else version.predicted_pass_rate,
        cost_usd=float(cost) if isinstance(cost, int | float) and math.isfinite(cost) else None,
        fallback_rate=float(fallback) if isinstance(fallback, int | float) else None,
        teacher_share=float(chosen["teacher_share"]) if again else version.predicted_teacher_share,
        prompt_tokens=tuple(_trained_on_prompt_tokens(version)),
        student_share=float(share) if isinstance(share, int | float) else None,
        student_pass_rate=float(student) if isinstance(student, int | float) else None,
        student_calls=chosen.get("measured_on") if again else calls,
        slack=float(margin) if again and isinstance(margin, int | float) else slack_of(version),
        slow_labels=slow_labels(version.profile),
    )


def router_version_drift_check(*, version: RouterVersion) -> RouterVersion:
    """Stores the live numbers on the version and sets or clears ``drift_flag`` (left as it was while
    there are too few live calls to judge). ``drift_reason`` says what moved, or what was judged. A
    stopped version its own answers still find drifting is measured again on those it would have served
    since (``readmission.stopped_again``); re-admitted, its live numbers start afresh (``activated_at``)."""
    live = live_numbers(version)
    router = conf.get().router
    flag, reason = (
        version.drift_flag,
        f"{live.calls} live calls; drift is judged from {router.drift_min_calls}",
    )
    if live.calls >= router.drift_min_calls:
        last = version.drift_reason or ""
        held = is_held(version.drift_flag, last)
        if held:  # measured again on the labelled answers it would have served meanwhile
            live.student_labels += held_labels(version)
        predicted = predicted_by(version)
        since = ProfileDrift.objects.filter(profile_id=version.profile_id).values_list("since", flat=True)
        new = None  # an input-shift hold is released on the labels since the shift began only
        if predicted.slow_labels and (start := since.first()) is not None:
            new = live_numbers(version, start).student_labels + (held_labels(version, start) if held else [])
        judged = judge_live(live, predicted, latched(last), held, new)
        flag, reason = judged.stop, judged.reason
        # the prediction was wrong: re-fitted on the labels, it serves on where a threshold still meets
        # the target at the fit's bound (``recalibration``), instead of stopping, holding or routing too
        # little to the student
        worse = judged.stop or judged.hold
        if worse or better_shown(live.student_labels, predicted.student_pass_rate):
            way = WORSE if worse else BETTER
            refit, why = refitted(version, live.student_labels, way, live.student_scores)
            if refit is not None:
                version.calibration, flag, reason = refit, False, f"{why}; {reason}"[:4000]
    restart: dict[str, Any] = {}
    if version.drift_flag and flag:
        episode = ProfileDrift.objects.filter(profile_id=version.profile_id)
        held_since = held_labels(version, episode.values_list("since", flat=True).first())
        flag, reason = stopped_again(version, reason, held=held_since, slack=slack_of(version))
        if flag:  # still stopped: re-fitted on the answers it would have served since
            refit, why = refitted(version, held_since, WORSE)
            if refit is not None:
                version.calibration, flag, reason = refit, False, f"{why}; {reason}"[:4000]
        restart = {} if flag else {"activated_at": timezone.now()}
    if not flag and reason.startswith(RECALIBRATED):  # a fresh window for the new prediction
        restart = {"activated_at": timezone.now(), "calibration": version.calibration}
    budget, labelled = labelling(version.profile).budget, len(live.student_labels)
    if not flag and not is_suspected(flag, reason) and labelled < budget and not restart:
        reason = f"{labels_wanted(labelled, budget)}; {reason}"
    RouterVersion.objects.filter(pk=version.pk).update(
        drift_checked_at=timezone.now(),
        live_calls=live.calls,
        live_teacher_share=live.teacher_share,
        live_pass_rate=live.pass_rate,
        drift_flag=flag,
        drift_reason=reason,
        **restart,
    )
    version.refresh_from_db()
    return version
