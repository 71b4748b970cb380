"""Issue 38's bar on the shifted-mix benchmark (``bench/router_shift.py``): per stream, whether each
profile was served at its quality target, and at most ``BAR_OVER_ODDS`` over the router that knows each
call's true odds (``odds_router``).

The rule: both routers are held to the *same* target, the profile's, and the target is a statement
about rates, not about one draw of outcomes. With a relative target (the default, 0.98x always-teacher)
it is that share of the teacher's *true* pass rate on the stream's calls (the mean of its odds); with an
absolute one, the number, unless no routing of those calls reaches it on their true odds (the teacher
itself below it, and no call where the student is better): then the profile is held to what the safe
policy serves, always the teacher, as calibration (``calibrate``: "always the teacher") and the fixed
fallback (``truth``) serve it. The router that knows each call's true odds meets that target exactly, in
expectation over the outcomes it cannot know: it routes by the odds, at the cheapest threshold whose
expected pass rate meets it. Before 2026-12-07 it chose its threshold in hindsight, on the stream's
realized outcomes against the realized teacher rate: a floor that knows the draw, not the odds, which
on a short stream is luckier than any router can be (seed 2's summarize, the teacher right 0.952 on the
stream against 0.974 on the calibration calls: the hindsight router spent that chance fall of the
target). The deployed router is judged on the same target: its served pass rate against the required
one with its paired confidence bound (``served_margin``), and, since the replays know the odds, exactly
on the true rates of the calls as it routed them (``true_gap``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from routing.router.learning.calibration import (
    PolicyData,
    Target,
    one_sided_alpha,
    paired_difference_lower,
)
from routing.router.learning.records import ReplayRecord

BAR_OVER_ODDS = 0.10  # issue 38's bar: at most 10% over the router that knows each call's true odds


@dataclass(frozen=True)
class Odds:
    """Each call's true odds, from the generator (``bench/router_data/synthetic.py``): the teacher right,
    the student path right (its own answer, or the teacher's after a failed verification), and the
    student path's expected cost (the student, plus the teacher when it falls back)."""

    student: np.ndarray  # the student right (the generator's p_student; the score the odds router ranks)
    teacher: np.ndarray
    student_path: np.ndarray
    student_path_cost: np.ndarray
    teacher_cost: np.ndarray

    def served(self, to_teacher: np.ndarray) -> np.ndarray:
        """Per call, the chance it is served right when routed so (the teacher, else the student path)."""
        return np.where(np.asarray(to_teacher, dtype=bool), self.teacher, self.student_path)

    def required(self, target: Target) -> float:
        """The target as stated, on the true rates (``odds_router`` settles an unreachable absolute one)."""
        return target.required(float(self.teacher.mean()))


def odds_of(records: Sequence[ReplayRecord]) -> Odds | None:
    """The calls' true odds, or None when a record does not carry them (a real replay). A verifier's
    strength (false accept, false reject) gives the fallback's odds; where a record has a verifier of
    unknown strength, its recorded verdict stands in; with no verifier only an upstream error falls back."""
    if not records or not all("p_student" in r.meta and "p_teacher" in r.meta for r in records):
        return None
    data = PolicyData.from_records(records)
    p_s = np.asarray([float(r.meta["p_student"]) for r in records])
    p_t = np.asarray([float(r.meta["p_teacher"]) for r in records])
    fails, right = np.zeros(len(records)), np.zeros(len(records))
    for i, r in enumerate(records):
        error = float(r.meta.get("p_error") or 0.0)
        strength = r.meta.get("verifier")
        if r.has_verifier and strength:
            false_accept, false_reject = (float(v) for v in strength)
            fails[i] = error + (1 - error) * (p_s[i] * false_reject + (1 - p_s[i]) * (1 - false_accept))
            right[i] = (1 - error) * p_s[i] * (1 - false_reject)
        elif r.has_verifier:  # strength unknown: the recorded verdict decides the fallback
            fails[i] = float(data.falls_back[i])
            right[i] = 0.0 if data.falls_back[i] else p_s[i]
        else:
            fails[i] = error
            right[i] = (1 - error) * p_s[i]
    return Odds(p_s, p_t, right + fails * p_t, data.s_cost + fails * data.t_cost, data.t_cost)


@dataclass(frozen=True)
class OddsRouter:
    to_teacher: np.ndarray  # its routes
    cost: float  # mean realized cost per call of those routes on the stream
    expected_pass: float
    required: float  # the target both routers are held to (the module docstring's rule)
    met: bool  # False: no routing meets the stated target on the true odds (absolute): always the teacher


def odds_router(records: Sequence[ReplayRecord], target: Target) -> OddsRouter | None:
    """The router that knows each call's true odds, run as deployed (the teacher where the student's odds
    are at or under a threshold; else the student, the teacher on a failed verification) at the cheapest
    threshold whose pass rate on the true odds meets the target on the true odds (no margin: it knows
    them). An absolute target no threshold meets on the odds: always the teacher (``met`` False), as
    calibration serves it, and the target both are held to is the teacher's true rate. None when the
    records carry no odds."""
    odds = odds_of(records)
    if odds is None:
        return None
    n = len(records)
    order = np.argsort(odds.student, kind="stable")  # the least likely right first: to the teacher first
    ranked = odds.student[order]
    cum = {
        name: np.concatenate([[0.0], np.cumsum(values[order])])
        for name, values in {
            "teacher": odds.teacher,
            "path": odds.student_path,
            "t_cost": odds.teacher_cost,
            "s_cost": odds.student_path_cost,
        }.items()
    }
    ks = np.arange(n + 1)
    cuts = np.concatenate([[True], ranked[1:] != ranked[:-1], [True]])  # a threshold splits no tie
    passed = (cum["teacher"] + cum["path"][n] - cum["path"]) / n
    cost = (cum["t_cost"] + cum["s_cost"][n] - cum["s_cost"]) / n
    required = odds.required(target)
    feasible = cuts & (passed >= required - 1e-12)
    met = bool(feasible.any())
    k = int(ks[feasible][np.argmin(cost[feasible])]) if met else n
    to_teacher = np.zeros(n, dtype=bool)
    to_teacher[order[:k]] = True
    realized = PolicyData.from_records(records).simulate(to_teacher)["cost"]
    held_to = required if met else float(odds.teacher.mean())
    return OddsRouter(to_teacher, float(realized.mean()), float(passed[k]), held_to, met)


def odds_router_cost(records: Sequence[ReplayRecord], target: Target) -> float | None:
    """``odds_router``'s mean cost per call (None: the records carry no odds)."""
    found = odds_router(records, target)
    return None if found is None else found.cost


def true_gap(records: Sequence[ReplayRecord], to_teacher: np.ndarray, target: Target) -> float | None:
    """The served pass rate minus the required one, both on the calls' true odds, for the calls routed
    as ``to_teacher`` (each decided before its outcome was drawn, so its chance is its odds): the bar's
    target judged without the draw's noise. None when the records carry no odds."""
    odds, router = odds_of(records), odds_router(records, target)
    if odds is None or router is None:
        return None
    return float(odds.served(to_teacher).mean()) - router.required


@dataclass(frozen=True)
class Served:
    """What callers got on one profile's stream, as the bar judges it: after the replayed retrain where
    one was admitted, else as the drift watch served it."""

    profile: str
    stream: str  # "in-distribution", "shifted", "shifted, harder"
    meets: str  # "yes" | "within margin" | "**no**" (``served_margin``)
    vs_odds: float | None  # served cost over the odds router's (None: the records carry no odds)
    true_gap: float | None = None  # served - required on the calls' true odds (``true_gap``)


def against_the_bar(served: list[Served], over: float = BAR_OVER_ODDS) -> list[str]:
    """The table of issue 38's bar per stream: how many profiles meet their target (a miss within the
    confidence margin counted apart), and how many are served at most ``over`` above the odds router,
    naming the others."""
    lines = [
        "| stream | profiles | target met | below it within the margin | below it beyond the margin "
        f"| below it on the true odds | served at most {over:.0%} over the odds router | over it |",
        "|---|---:|---:|---:|---:|---|---:|---|",
    ]
    for stream in dict.fromkeys(s.stream for s in served):
        rows = [s for s in served if s.stream == stream]
        over_it = [s for s in rows if s.vs_odds is not None and s.vs_odds > over + 1e-12]
        costed = sum(1 for s in rows if s.vs_odds is not None)
        names = ", ".join(f"{s.profile} {s.vs_odds:+.1%}" for s in over_it) or "—"
        short = [s for s in rows if s.true_gap is not None and s.true_gap < -1e-12]
        below = ", ".join(f"{s.profile} {s.true_gap:+.3f}" for s in short if s.true_gap is not None)
        lines.append(
            f"| {stream} | {len(rows)} | {sum(s.meets == 'yes' for s in rows)} | "
            f"{sum(s.meets == 'within margin' for s in rows)} | {sum(s.meets == '**no**' for s in rows)} | "
            f"{below or '—'} | {costed - len(over_it)} of {costed} | {names} |"
        )
    return lines


def meets_of(point: float, upper: float) -> str:
    """'yes' at or above the required rate, 'within margin' below it by less than the confidence margin
    (``served_margin``'s upper bound at or above 0), else '**no**'."""
    return "yes" if point >= -1e-12 else ("within margin" if upper >= 0 else "**no**")


def served_margin(ok: np.ndarray, t_ok: np.ndarray, target: Target) -> tuple[float, float]:
    """(served pass rate - required, and the upper confidence bound of it at the target's z): paired
    with the teacher on the same calls, the MOVER bound calibration uses (``paired_difference_lower``)
    turned the other way. An upper bound under 0 is a miss beyond the confidence margin; a point under 0
    with the bound above is a miss the calls cannot tell from chance."""
    n = len(ok)
    losses, gains = float(np.sum(t_ok & ~ok)), float(np.sum(~t_ok & ok))
    teacher = float(t_ok.mean())
    slack = teacher - target.required(teacher)
    point = slack + (gains - losses) / n
    lower_fall = paired_difference_lower(
        np.asarray([gains]), np.asarray([losses]), np.asarray([float(n)]), one_sided_alpha(target.z)
    )[0]
    return point, slack - float(lower_fall)


def gap_text(gap: float | None) -> str:
    return "—" if gap is None else f"{gap:+.3f}"
