"""Inputs unlike the version's calibration calls, on a profile whose labels come slowly: the safe policy.

A version's prediction holds for calls like those it was calibrated on. Where the profile's verifier is
strong (``precision.Precision.strong``), a wrong answer on new inputs is seen at once (a failed
verification, a fallback), and the cost and fallback tests follow the change. Where it is not (no
verifier, or a weak one), the only evidence of correctness is background teacher samples, which on the
short streams of a shifted mix are too few for the correctness test to decide (``sequential.student_sprt``;
``docs/benchmarks/router.md``). There, drift of the input-shift score (``sequential.psi_test``) is not
left to chance: the version is *held* (``drift.BLIND``), so the safe fixed policy serves
(``truth.fixed_choice``: the cheapest fixed policy whose measured quality meets the target, else the
teacher) with sampling raised, and routes again when its correctness test, on the answers it would have
served (``held.held_labels``), accepts H0: enough labels of the new inputs show it meets its prediction.
A retrain admitted on the new traffic replaces it too (``admission``).
"""

from __future__ import annotations

from routing.models import TaskProfile
from routing.router.versions.precision import verifier_precision

INPUTS = "input shift"  # how the input-shift test's reason starts (``drift.judge_live``)


def slow_labels(profile: TaskProfile) -> bool:
    """Whether ``profile``'s labels come only from background samples: its verifier is not strong."""
    return not verifier_precision(profile).strong


def blind(slow: bool, drifted: list[str], earlier: str, accepted: bool) -> bool:
    """Whether the version is held for its inputs: labels come slowly (``slow``), the input-shift test
    found drift at this check (among ``drifted``) or at an earlier one still standing (``earlier``, the
    latched drift), and its correctness test has not accepted H0."""
    shifted = any(r.startswith(INPUTS) for r in drifted) or earlier.startswith(INPUTS)
    return slow and shifted and not accepted
