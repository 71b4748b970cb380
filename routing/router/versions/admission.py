"""Admission after a shift: a candidate trained once drift was found is judged on the calls since then.

When drift was found for a profile (``ProfileDrift.since``: a version's correctness drifted, or its cost or
inputs did), the held-out calls from before are another traffic: they cannot vouch for a candidate on the
new one, however many there are. Admission then also asks, of the labelled held-out calls made since the
shift (distinct calls, each counted once: a sample weighted up is still one fact):

- at least ``MIN_HELDOUT_CALLS`` of them (fewer: refused, the safe fixed policy keeps serving, and the
  raised sampling labels more until a later retrain has enough);
- the lower confidence bound (the target's z; paired with the teacher on the same calls, the MOVER bound
  calibration uses, ``calibration.quality_margins``) of the candidate's pass rate minus the required one
  at least 0: a point estimate on a handful of calls is not a promise (a candidate admitted at 1.000 on a
  few post-shift calls then served 0.910 against 0.934, ``bench/router_shift.py --retrain``).

Plain functions of records (no database): ``router_version_admit`` and the benchmark's replayed
retrain (``bench/router_shift_retrain.py``) judge by the same rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from routing.router.learning.calibration import PolicyData, Target, quality_margins
from routing.router.learning.records import ReplayRecord


@dataclass(frozen=True)
class Recent:
    """The candidate on the labelled held-out calls since the shift."""

    calls: int  # distinct labelled calls
    pass_rate: float | None = None  # served by the candidate (its routing, fallbacks included)
    required: float | None = None
    margin: float | None = None  # lower confidence bound of (pass rate - required); >= 0 meets
    teacher_share: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def recent_numbers(records: Sequence[ReplayRecord], to_teacher: np.ndarray, target: Target) -> Recent:
    """``records``: the labelled (complete) held-out calls since the shift, each once; ``to_teacher``:
    the candidate's routing of them."""
    if not records:
        return Recent(0)
    data = PolicyData.from_records(records)
    routed = np.asarray(to_teacher, dtype=bool)
    ok = data.simulate(routed)["ok"].astype(bool)
    student = ~routed
    losses = float(np.sum(student & data.t_ok & ~ok))
    gains = float(np.sum(student & ~data.t_ok & ok))
    teacher = float(data.t_ok.mean())
    margin = quality_margins(
        n=data.n,
        k=np.asarray([float(routed.sum())]),
        losses=np.asarray([losses]),
        gains=np.asarray([gains]),
        passed=np.asarray([float(ok.sum())]),
        teacher_rate=teacher,
        target=target,
    )[0]
    return Recent(data.n, float(ok.mean()), target.required(teacher), float(margin), float(routed.mean()))


def refusal(recent: Recent, minimum: int, since: str) -> str:
    """Why the candidate is refused on the calls since the shift at ``since`` ("": it is not)."""
    if recent.calls < minimum:
        return (
            f"only {recent.calls} labelled held-out calls since the drift found at {since}; admission "
            f"needs {minimum} of the new traffic (the safe fixed policy serves, sampling raised, until a "
            "retrain has them)"
        )
    if recent.margin is None or recent.margin < -1e-12:
        return (
            f"held-out pass rate {recent.pass_rate:.3f} on {recent.calls} labelled calls since the drift "
            f"found at {since}: its confidence bound is {recent.margin:+.3f} from the target's "
            f"{recent.required:.3f}"
        )
    return ""
