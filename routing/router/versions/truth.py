"""Reads of what the ledger knows about correctness: each verifier's measured precision, and the
measured quality of the fixed policies a profile falls back on while it has no admitted version.

    verifier_precision(profile) -> Precision   how often an answer its verifier passed was wrong
    fixed_choice(profile)       -> FixedChoice  the cheapest fixed policy whose measured quality meets
                                                the target with its confidence bound; else the teacher

Both read the profile's newest ``QUALITY_WINDOW_CALLS`` calls (their legs, not their bodies). Only
labelled answers count (``records.Outcome.label``): a comparison with a background teacher sample, a
failed verification, or the pass of a verifier whose precision is measured good; unknown is never
passed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from routing import conf
from routing.models import RouterVersion, TaskProfile
from routing.router.learning.calibration import (
    PolicyData,
    Target,
    quality_margins,
)
from routing.router.learning.records import Outcome, ReplayRecord, outcome_from_leg
from routing.router.versions import profile_drift
from routing.router.versions.config import profile_target
from routing.router.versions.drift import BLIND, is_held
from routing.router.versions.precision import Precision, precision_of, rows_of
from routing.router.versions.precision import verifier_precision as verifier_precision  # its home moved

STUDENT_WITH_FALLBACK = TaskProfile.Policy.STUDENT_WITH_FALLBACK
ALWAYS_TEACHER = TaskProfile.Policy.ALWAYS_TEACHER


# --- the fixed fallback ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FixedChoice:
    """The fixed policy a profile with no admitted version runs, and why (the decision's reason)."""

    policy: str
    reason: str
    labelled: int = 0
    quality: float | None = None
    required: float | None = None
    margin: float | None = None
    cost_rel: float | None = None
    unmeasured: bool = False  # too few labelled calls to know: sample more until there are enough
    suspected: bool = False  # the profile's drift watch leans towards drift: sample more
    # it serves in place of the profile's active version, flagged or held: that version's re-measurement
    # (``drift.held_labels``) and a retrain's admission need the student's answers labelled: sample more
    replacing: bool = False

    @property
    def sample_more(self) -> bool:
        """Background sampling is raised (``DRIFT_SAMPLE_BOOST``; the student's leg at least
        ``LABELS_WANTED_STUDENT_RATE``, ``routing.call.sampling.boosted``) for the calls it serves."""
        return self.unmeasured or self.suspected or self.replacing

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _record(
    legs: list[dict[str, Any]], has_verifier: bool, trusted: bool
) -> tuple[ReplayRecord, float] | None:
    student: Outcome | None = next(
        (outcome_from_leg(leg, trusted=trusted) for leg in legs if leg.get("role") == "student"), None
    )
    teacher = next((outcome_from_leg(leg) for leg in reversed(legs) if leg.get("role") == "teacher"), None)
    record = ReplayRecord("", "", "", {"messages": []}, has_verifier, 0, False, student, teacher)
    if not record.complete:
        return None
    sampled = [leg for leg in legs if leg.get("background")]
    rate = float(sampled[-1].get("sample_rate") or 1.0) if sampled else 1.0
    return record, 1.0 / max(rate, 0.01)


def choose_fixed(
    profile: TaskProfile, rows: list[list[dict[str, Any]]], *, precision: Precision, target: Target
) -> FixedChoice:
    """The cheapest fixed policy whose measured quality on the labelled calls in ``rows`` meets
    ``target`` at its confidence bound: the cascade (student, teacher on a failed verification) when it
    does, else the teacher; the teacher too while fewer than ``MIN_LABELLED_CALLS`` calls are labelled.
    A call sampled at rate r stands for 1/r calls (the passes are labelled only by samples)."""
    minimum = conf.get().router.min_labelled_calls
    configured = (profile.policy_params or {}).get("fallback")
    if configured == ALWAYS_TEACHER:
        return FixedChoice(ALWAYS_TEACHER, "the profile's fallback is the teacher")
    has_verifier = precision.has_verifier
    pairs = [p for p in (_record(legs, has_verifier, precision.strong) for legs in rows) if p is not None]
    n = len(pairs)
    if n < minimum:
        why = f"{n} labelled calls; the teacher serves until {minimum} show what the student does"
        return FixedChoice(ALWAYS_TEACHER, why, n, unmeasured=True)
    data = PolicyData.from_records([r for r, _ in pairs])
    w = np.asarray([weight for _, weight in pairs])
    ok, cost, _, _ = data.student_path(fallback=True)
    quality, teacher_rate = float(np.average(ok, weights=w)), float(np.average(data.t_ok, weights=w))
    losses = float(np.average(data.t_ok & ~ok, weights=w)) * n
    gains = float(np.average(~data.t_ok & ok, weights=w)) * n
    margin = float(
        quality_margins(
            n=n,
            k=np.zeros(1),
            losses=np.asarray([losses]),
            gains=np.asarray([gains]),
            passed=np.asarray([quality * n]),
            teacher_rate=teacher_rate,
            target=target,
        )[0]
    )
    required = target.required(teacher_rate)
    teacher_cost = float(np.average(data.t_cost, weights=w))
    cost_rel = float(np.average(cost, weights=w)) / teacher_cost if teacher_cost > 0 else None
    measured = f"measured quality {quality:.3f} on {n} labelled calls, target {required:.3f}"
    if margin >= 0 and (cost_rel is None or cost_rel < 1.0):
        policy, why = (
            STUDENT_WITH_FALLBACK,
            f"the cascade meets the target ({measured}, bound margin {margin:+.3f})",
        )
    else:
        policy, why = (
            ALWAYS_TEACHER,
            f"the cascade misses the target ({measured}, bound margin {margin:+.3f})",
        )
        if margin >= 0:
            why = f"the cascade costs more than the teacher ({measured})"
    return FixedChoice(policy, why, n, quality, required, margin, cost_rel)


@dataclass(frozen=True)
class Truth:
    """What the ledger knows of a profile's correctness (the router page, ``/api/router``)."""

    precision: Precision
    fallback: FixedChoice

    def as_json(self) -> dict[str, Any]:
        return {"verifier_precision": self.precision.as_json(), "fallback": self.fallback.as_json()}


def profile_truth(profile: TaskProfile) -> Truth:
    """The profile's verifier precision and its fixed fallback's choice (``fixed_choice``)."""
    rows = rows_of(profile)
    return Truth(precision_of(profile, rows), fixed_choice(profile, rows=rows))


def fixed_choice(profile: TaskProfile, *, rows: list[list[dict[str, Any]]] | None = None) -> FixedChoice:
    """What a profile with no usable router version runs now (``routing.router.policies``). The
    verifier's precision is read on the newest calls (``rows``); the fallback is measured on those since
    the profile's drift watch last saw its traffic change (``profile_drift``), and its watch leaning
    towards drift raises sampling (``FixedChoice.suspected``)."""
    state = profile_drift.state_of(profile.pk)
    rows = rows_of(profile) if rows is None else rows
    precision = precision_of(profile, rows)
    if state is not None and state.since is not None:
        rows = rows_of(profile, state.since)
    choice = choose_fixed(profile, rows, precision=precision, target=profile_target(profile))
    if state is not None and state.flag and state.reason.startswith(BLIND):  # held as a version is
        choice = replace(choice, reason=f"{choice.reason}; {BLIND}")
    if profile_drift.suspected(state) and choice.policy != ALWAYS_TEACHER:
        choice = replace(choice, suspected=True, reason=f"{choice.reason}; drift suspected: sampling more")
    if _version_out(profile):
        choice = replace(
            choice, replacing=True, reason=f"{choice.reason}; in the drifting version's place: sampling more"
        )
    return choice


def _version_out(profile: TaskProfile) -> bool:
    """Whether the profile's active version is flagged or held (the fixed policy serves in its place)."""
    found = RouterVersion.objects.filter(profile_id=profile.pk, status=RouterVersion.Status.ACTIVE)
    return any(
        flag or is_held(flag, reason or "")
        for flag, reason in found.values_list("drift_flag", "drift_reason")
    )
