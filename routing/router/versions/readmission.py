"""A version stopped by drift of its correctness, measured again and re-admitted (issue 38).

A stop (``drift.Judgement.stop``) hands the profile to its safe fixed policy, which samples the student's
answer on the calls it serves (``truth.FixedChoice.replacing``: at least ``LABELS_WANTED_STUDENT_RATE``,
the background samples priced as learning spend on the learning key). Those the stopped version would
have served itself (``drift.held_labels``: scored below its threshold, passed their verifier), labelled
since the stop, measure it again at every drift check. It is re-admitted, without a retrain, when the
mixture SPRT (``sequential.meets_sprt``: valid at every look) shows their rate of right answers above the
floor at which the whole served pass rate meets the target (``sequential.readmission_floor``: the
prediction less the version's slack, its admitted confidence bound over the target, over its share of
calls), not by a fixed margin. A version truly below that floor is re-admitted with probability at most
``ALPHA`` however long it is watched. Until then its reason says where the test stands; a retrain admitted
meanwhile replaces it as before.
"""

from __future__ import annotations

from routing.models import RouterVersion
from routing.router.learning.sequential import meets_sprt, readmission_floor

AGAIN = "; measured again since the stop: "  # what a stopped version's reason says after its stop
READMITTED = "re-admitted"  # how the reason of a version re-admitted after a stop starts


def stopped_again(
    version: RouterVersion, stopped: str, *, held: list[bool], slack: float | None
) -> tuple[bool, str]:
    """A stopped version (``drift_flag``: its correctness drifted) measured again on the labels since the
    stop (the drift episode's ``since``): the student answers it would have served on the safe policy's
    calls (``held_labels``). Re-admitted (False) when ``meets_sprt`` shows their rate above the floor at
    which the whole served pass rate meets the target (``readmission_floor``: the prediction less the
    version's slack over its share); else still stopped (True), the reason saying where the test stands.
    ``stopped``: why it is stopped (its own answers' judgement). ``held`` and ``slack`` come from the drift
    check (``drift.held_labels`` since the episode's ``since``, ``drift.slack_of``), which calls this."""
    chosen = (version.calibration or {}).get("chosen") or {}
    q0, share = chosen.get("student_pass_rate"), chosen.get("student_served_share")
    if not isinstance(q0, int | float) or not isinstance(share, int | float) or not share:
        return True, f"{stopped}{AGAIN}no prediction of the student's own answers: a retrain replaces it"
    floor = readmission_floor(float(q0), float(share), slack)
    test = meets_sprt(held, floor)
    given = f"slack {slack:+.3f}" if slack is not None else "no slack known"
    needs = f"above {floor:.3f} (predicted {float(q0):.3f}, {given}, over {float(share):.0%} of calls)"
    if not test.labels:
        return True, f"{stopped}{AGAIN}no labelled answers it would have served yet; the target needs {needs}"
    head = f"{test.right} of {test.labels} answers it would have served right ({test.rate:.3f})"
    if test.meets:
        lower = test.lower or 0.0
        return False, (
            f"{READMITTED}: measured again since its stop, {head}, lower confidence bound {lower:.3f}; the "
            f"target needs {needs} (mixture SPRT log-LR {test.llr:+.2f} >= {test.bound:.2f}); it had "
            f"stopped on: {stopped}"
        )[:4000]
    return True, (
        f"{stopped}{AGAIN}{head}; re-admitted when shown {needs} "
        f"(mixture SPRT log-LR {test.llr:+.2f}, re-admitted at {test.bound:.2f})"
    )[:4000]
