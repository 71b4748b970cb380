"""The drift watch replayed on one stream (``bench/router_shift.py``), hold and release included.

The checks of ``routing/router/versions/drift.py`` by the same functions
(``routing/router/learning/sequential.py``), every ``check_every`` calls. Correctness: the student's own
answers (not routed to the teacher, not fallen back), labelled by a background teacher sample at
``sample_rate`` (x ``boost`` while a test leans towards drift, and while fewer than ``label_budget`` are
labelled, as ``drift.LABELS_WANTED`` does), against calibration's
``student_pass_rate``, H1 a fall of ``pass_margin`` or the version's slack (calibration's bound margin),
at least ``pass_floor`` (``sequential.alternative``); the teacher's answers are the reference and are not
tested. Fallback rate, cost per call, teacher share and inputs are judged on the calls the version routed.

Correctness drifted: the version stops, the teacher serves the rest. Correctness leaning towards drift
while another test found drift (now or at an earlier check: ``drift.latched``): held (``drift.HELD``), the
teacher serves. While held, the version is measured again as ``drift.held_labels`` does: the teacher's
calls are sampled for the student's answer at the raised rate (at least ``wanted_student_rate``,
``LABELS_WANTED_STUDENT_RATE``), and of those, the answers the version
would have served itself (left to the student, passing their verifier) are labelled; the hold ends
(released, the version routes again) when the correctness test accepts H0, and becomes a stop when it
decides drift. ``release=False`` replays the watch as it was before the release was replayed: a hold
lasts to the end of the stream.

A stop is measured again the same way (``readmission.stopped_again``): the answers the version would have
served, labelled since the stop, re-admit it when ``sequential.meets_sprt`` shows their rate above
``sequential.readmission_floor`` (the prediction less the version's slack over its share); re-admitted,
its live window starts afresh (``activated_at``). ``readmit=False``: a stop lasts to the end, as before.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

import numpy as np

from routing import conf
from routing.router.learning.calibration import PolicyData, binomial_lower, one_sided_alpha
from routing.router.learning.evaluate import TrainedRouter
from routing.router.learning.records import ReplayRecord
from routing.router.learning.sequential import (
    alternative,
    cost_sprt,
    fallback_sprt,
    meets_sprt,
    psi_test,
    readmission_floor,
    share_moved,
    student_sprt,
)
from routing.router.versions.recalibration import (
    BETTER,
    WORSE,
    Group,
    Recalibration,
    better_shown,
    recalibrate,
    scored_groups,
)


@dataclass(frozen=True)
class Watch:
    sample_rate: float = 0.05
    boost: float = 4.0
    check_every: int = 50
    pass_margin: float = 0.05
    pass_floor: float = 0.01  # the alternative: pass_margin or the version's slack, at least this
    share_margin: float = 0.10
    training_window: int = 50000  # MAX_TRAINING_CALLS: a retrain reads the profile's newest rows
    retrain_every: int = 100  # calls between retrains while refused (the beat's router_retrain_due)
    release: bool = True  # a held version is measured again and released (``drift.held_labels``)
    readmit: bool = True  # a stopped version is measured again and re-admitted (``readmission``)
    # while the teacher serves in the version's place (held or stopped), its calls are sampled for the
    # student's answer at least at this rate (``LABELS_WANTED_STUDENT_RATE``)
    wanted_student_rate: float = 0.5
    # the version is sampled as if suspected while its student answers have fewer labels (``LABEL_BUDGET``)
    label_budget: int = 30
    # labels carry the version's score, so a recalibration may fit a slope (``recalibration.fit_line``)
    scored: bool = True
    # the profile's verifier is not strong: input-shift drift holds the version until its correctness
    # test accepts H0 (``drift.BLIND``, ``routing/router/versions/input_shift.py``)
    slow_labels: bool = False


@dataclass(frozen=True)
class Watched:
    """What the drift watch did on one stream."""

    first: int | None  # the call count at the first check that found drift (None: never)
    which: str  # the tests that did
    stop: int | None  # correctness drifted there and it stayed stopped to the end (None: not stopped)
    student_labels: int  # labelled answers of the student's own (the correctness test's evidence)
    student_rate: float | None  # their correctness, against calibration's prediction
    psi: float  # input shift (prompt sizes) of the calls the version routed
    rates: tuple[float, ...] = ()  # each call's background sampling rate (boosted while suspected)
    served: tuple[bool, ...] = ()  # each call: the version routed it (else the teacher served it)
    holds: tuple[int, ...] = ()  # the checks that held the version
    releases: tuple[int, ...] = ()  # the checks that released it (correctness accepted H0)
    # each check: (calls, labelled student answers, right ones, correctness log-LR, its decision, the
    # sampling rate after it) (``router_shift --trace``)
    checks: tuple[tuple[int, int, int, float, str, float], ...] = ()
    stops: tuple[int, ...] = ()  # every check that stopped it (correctness drifted)
    readmits: tuple[int, ...] = ()  # the checks that re-admitted it after a stop (``meets_sprt``)
    # the checks that recalibrated it (``recalibration``), and which way
    recalibrations: tuple[tuple[int, str], ...] = ()
    # each call the version routed: sent to the teacher at the threshold it served at then
    routed_teacher: tuple[bool, ...] = ()

    @property
    def held(self) -> bool:
        """Held at the end of the stream (not stopped, not released since)."""
        after = [*self.releases, *(n for n, _ in self.recalibrations)]  # released, or serving recalibrated
        return bool(self.holds) and (not after or max(after) < self.holds[-1])

    @property
    def out_at(self) -> int | None:
        """The call from which the version served nothing to the end (stopped, or held for good)."""
        return self.stop if self.stop is not None else (self.holds[-1] if self.held else None)

    def story(self) -> str:
        """'flagged' column: the first check that found drift, and what the watch did after."""
        if self.first is None:
            return "—"
        parts = [f"{self.first} ({self.which})"]
        events = sorted(
            [(n, "held") for n in self.holds]
            + [(n, "released") for n in self.releases]
            + [(n, "stops") for n in self.stops or ((self.stop,) if self.stop is not None else ())]
            + [(n, "re-admitted") for n in self.readmits]
            + [(n, f"recalibrated ({way})") for n, way in self.recalibrations]
        )
        parts += [f"{verb} at {n}" if n != self.first else verb for n, verb in events]
        return "; ".join(parts)


def slow_labels(records: list[ReplayRecord]) -> bool:
    """Whether the profile's verifier is not strong, measured as ``precision.precision_of`` does on its
    training calls (every student pass compared): labels come only from background samples, so drift of
    the input-shift score holds the version (``input_shift``, ``Watch.slow_labels``)."""
    router = conf.get().router
    passes = [bool(r.student.correct) for r in records if r.student and r.student.verdict == "pass"]
    if len(passes) < router.min_precision_samples:
        return True
    alpha = one_sided_alpha(max(router.target_z, 1.0))
    lower = float(binomial_lower(np.asarray([sum(passes)]), np.asarray([len(passes)]), alpha)[0])
    return lower < router.strong_verifier_precision


def prompt_tokens(record: ReplayRecord) -> float:
    """The call's prompt size in tokens as the ledger counts them (4 characters a token here)."""
    return len(json.dumps(record.request, ensure_ascii=False)) / 4.0


@dataclass(frozen=True)
class Refit:
    """What a recalibration (``routing/router/versions/recalibration.py``) is replayed on: the stream's
    scores, both legs of each call, and the version's calibration as stored (``to_json``)."""

    scores: np.ndarray
    data: PolicyData
    calibration: dict[str, Any]


@dataclass
class Serving:
    """The threshold the version serves at and what it predicts there (as calibrated, or recalibrated)."""

    threshold: float
    to_teacher: np.ndarray
    sim: dict[str, np.ndarray]
    point: dict[str, Any]
    measured_on: int
    own: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.own = ~(np.asarray(self.to_teacher, dtype=bool) | self.sim["fallback"].astype(bool))

    @property
    def q0(self) -> float | None:
        return self.point.get("student_pass_rate")

    @property
    def share(self) -> float:
        return float(self.point.get("student_served_share") or 0.0)

    @property
    def margin(self) -> float | None:
        return self.point.get("margin")


def watch_stream(
    sim: dict[str, np.ndarray],
    to_teacher: np.ndarray,
    prompts: list[float],
    trained: TrainedRouter,
    trained_on: list[float],
    watch: Watch,
    seed: int,
    refit: Refit | None = None,
) -> Watched:
    """The module docstring's watch on one stream: ``sim`` is the version's routing ``to_teacher``
    simulated on every call (what it would have done, served or not). With ``refit``, a version whose
    correctness test decides (or, another test having found drift, leans towards) drift is recalibrated
    on its labels when a threshold meets the target at the fit's bound, instead of stopped or held, and
    one shown better than predicted routes more to the student (``recalibration``)."""
    chosen = trained.calibration.chosen
    measured_on = round((chosen.student_served_share or 0.0) * trained.calibration.n)
    point = asdict(chosen) if is_dataclass(chosen) else dict(vars(chosen))  # a test's stand-in: vars
    threshold = float(getattr(trained, "threshold", 0.0))
    cur = Serving(threshold, np.asarray(to_teacher, dtype=bool), sim, point, measured_on)
    rng = np.random.default_rng(seed)
    count = len(to_teacher)
    labels: list[bool] = []
    scored: list[float | None] = []  # the version's score of each labelled call (``labels``, ``again``)
    suspected = False
    first: tuple[int | None, str] = (None, "")
    shift = 0.0
    rates: list[float] = []
    mine = np.zeros(count, dtype=bool)
    teacher_at = np.zeros(count, dtype=bool)  # the threshold's route when it was served
    fallback_at = np.zeros(count, dtype=bool)
    cost_at = np.zeros(count, dtype=float)
    raised = min(1.0, watch.sample_rate * watch.boost)
    replaced = max(raised, watch.wanted_student_rate)  # the student's leg while the teacher serves instead
    wanted = watch.label_budget > 0  # activated with no labels (``drift.LABELS_WANTED``), until a check
    stop: int | None = None
    held = False
    holds: list[int] = []
    releases: list[int] = []
    prompt_array = np.asarray(prompts, dtype=float)
    checks: list[tuple[int, int, int, float, str, float]] = []
    stops: list[int] = []
    readmits: list[int] = []
    refits: list[tuple[int, str]] = []
    groups: list[Group] = []  # labels of earlier windows, with the threshold that served them
    again: list[bool] = []  # since the stop: the labelled answers it would have served
    scored_again: list[float | None] = []
    start = 0  # its live window: from activation, its re-admission or its recalibration
    standing = False  # a drift of cost, teacher share or inputs found in this window (``drift.latched``)
    moved = False  # the input-shift test found drift in this window (``input_shift.blind``)

    def grouped(now: list[bool], scores: list[float | None]) -> list[Group]:
        if refit is None:
            return [Group(cur.threshold, len(now), sum(now))]
        return scored_groups(refit.calibration, cur.threshold, now, scores if watch.scored else [])

    def refitted(direction: str, now: list[bool], scores: list[float | None]) -> Recalibration | None:
        if refit is None:
            return None
        return recalibrate(refit.calibration, [*groups, *grouped(now, scores)], direction, cur.threshold)[0]

    def score(i: int) -> float | None:
        return float(refit.scores[i]) if refit is not None else None

    for i in range(count):
        teacher_at[i], fallback_at[i] = cur.to_teacher[i], cur.sim["fallback"][i]
        cost_at[i] = cur.sim["cost"][i]
        n = i + 1
        rec: Recalibration | None = None
        if stop is not None and watch.readmit:
            rates.append(replaced)  # the teacher serves; the answers it would have served are labelled
            if cur.own[i] and rng.random() < replaced:
                again.append(bool(cur.sim["ok"][i]))
                scored_again.append(score(i))
            if n % watch.check_every or cur.q0 is None or not cur.share:
                continue
            floor = readmission_floor(cur.q0 or 0.0, cur.share, cur.margin)  # ``stopped_again``
            if meets_sprt(again, floor).meets:
                groups += grouped(labels, scored)
                stop, start, standing, suspected, moved = None, n, False, False, False
                labels, again, scored, scored_again = [], [], [], []
                readmits.append(n)
                wanted = watch.label_budget > 0
                continue
            if (rec := refitted(WORSE, labels + again, scored + scored_again)) is None:
                continue
        elif stop is not None or (held and not watch.release):
            rates.append(replaced)  # the teacher serves, unmeasured: its calls sampled for the student
            continue
        else:
            if held:  # the teacher serves; the student answers it would have served are labelled again
                rates.append(replaced)
                if cur.own[i] and rng.random() < replaced:
                    labels.append(bool(cur.sim["ok"][i]))
                    scored.append(score(i))
            else:
                mine[i] = True
                rate = min(1.0, watch.sample_rate * (watch.boost if suspected or wanted else 1.0))
                rates.append(rate)
                if cur.own[i] and rng.random() < rate:
                    labels.append(bool(cur.sim["ok"][i]))
                    scored.append(score(i))
            if n < watch.check_every or n % watch.check_every:
                continue
        if rec is None:
            routed = mine[:n] & (np.arange(n) >= start)
            calls = int(routed.sum())
            point = cur.point
            fall = alternative(watch.pass_margin, cur.margin, watch.pass_floor)  # H1, as ``judge_live``
            tests = {
                "correctness": student_sprt(
                    labels, cur.q0 or 0.0, cur.share, fall, cur.measured_on, wide=watch.pass_margin
                ),
                "fallback rate": fallback_sprt(
                    int(fallback_at[:n][routed].sum()), calls, float(point["fallback_rate"])
                ),
                "cost per call": cost_sprt([float(c) for c in cost_at[:n][routed]], float(point["cost_usd"])),
            }
            found = [name for name, test in tests.items() if test.decision == "drift"]
            if share_moved(
                int(teacher_at[:n][routed].sum()), calls, float(point["teacher_share"]), watch.share_margin
            ):
                found.append("teacher share")
            shift, drift_at = psi_test(trained_on, list(prompt_array[:n][routed]))
            if shift >= drift_at:
                found.append(f"inputs (PSI {shift:.2f})")
                moved = True
            if found and first[0] is None:
                first = (n, ", ".join(found))
            standing = standing or bool(found)
            decision = tests["correctness"].decision
            if "correctness" in found:
                if (rec := refitted(WORSE, labels, scored)) is None:
                    stop, held = n, False
                    stops.append(n)
            elif held:
                if decision == "holds":  # measured again and as predicted: it routes again
                    held = False
                    releases.append(n)
                else:
                    rec = refitted(WORSE, labels, scored)
            elif watch.slow_labels and moved and decision != "holds":
                held = True  # new inputs where labels come slowly (``drift.BLIND``): not recalibrated
                holds.append(n)
            elif standing and decision == "suspected":
                # held (``drift.HELD``): correctness leans towards drift while another test found drift
                # (at this check or an earlier one: it stands until a retrain, ``drift.latched``)
                if (rec := refitted(WORSE, labels, scored)) is None:
                    held = True
                    holds.append(n)
            else:
                # a test leaning towards drift, or drift of cost, fallbacks, teacher share or inputs (the
                # version keeps serving, retrain queued): its correctness is in doubt, so sampled more
                suspected = bool(found) or any(test.decision == "suspected" for test in tests.values())
                if better_shown(labels, cur.q0):
                    rec = refitted(BETTER, labels, scored)
            test = tests["correctness"]
        if rec is not None and refit is not None:  # serves at the recalibrated threshold, a fresh window
            groups += grouped(labels + again, scored + scored_again)
            routes = refit.scores >= rec.threshold
            cur = Serving(rec.threshold, routes, refit.data.simulate(routes), rec.chosen, rec.fit.labels)
            stop, held, standing, suspected, start, moved = None, False, False, False, n, False
            labels, again, scored, scored_again = [], [], [], []
            refits.append((n, rec.direction))
            wanted = watch.label_budget > 0
            continue
        wanted = len(labels) < watch.label_budget  # the check's ``LABEL_BUDGET`` (drift.LABELS_WANTED)
        after = (
            replaced
            if stop is not None or held
            else watch.sample_rate * (watch.boost if suspected or wanted else 1.0)
        )
        checks.append((n, len(labels), sum(labels), test.llr, decision, min(1.0, after)))
    return Watched(
        first[0],
        first[1],
        stop,
        len(labels),
        sum(labels) / len(labels) if labels else None,
        shift,
        tuple(rates),
        tuple(bool(m) for m in mine),
        tuple(holds),
        tuple(releases),
        tuple(checks),
        tuple(stops),
        tuple(readmits),
        tuple(refits),
        tuple(bool(t) for t in teacher_at),
    )
