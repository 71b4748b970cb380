"""The retrain a drift flag queues, replayed on a shifted stream (``bench/router_shift.py --retrain``).

At the call where the drift watch first found drift, ``router_retrain`` trains a candidate on the
profile's ledger and admission replays it on the held-out shard. Replayed here with the project's own
training and calibration (``train_and_calibrate``, the ledger's shards ``split``, its sample weighting
``sample_weighted``) on what the ledger would hold by then: the in-distribution calls the version
learned from, then the stream's calls up to the flag as the gateway logs them. A call the student
served is labelled only by a background teacher sample (at the watch's rate, boosted while suspected
the same way); a call the teacher served carries the student's answer only when a background student
sample ran it; a failed verification labels the student's answer wrong. Everything else is unknown and
does not train. Admission's rule is ``router_version_admit``'s (at least ``MIN_HELDOUT_CALLS`` labelled
held-out calls, their pass rate at least the required one; and, the drift having been found, as many
labelled held-out calls of the stream's, whose confidence bound meets the target:
``routing.router.versions.admission``), applied here to the replayed shard rather than to a database
row. An admitted candidate routes the rest of the stream.

Simulated: the ledger (records, not rows), the time a retrain takes (none: the candidate routes from
the next call), and the old traffic's labels (every in-distribution call is complete, as in the
router's training set here).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from routing.router.learning.calibration import PolicyData, Target
from routing.router.learning.evaluate import TrainedRouter, featurize, train_and_calibrate
from routing.router.learning.features import Featurizer
from routing.router.learning.metrics import policy_metrics
from routing.router.learning.records import Outcome, ReplayRecord
from routing.router.versions.admission import Recent, recent_numbers, refusal
from routing.router.versions.data import sample_weighted, shift_weighted, split

MIN_HELDOUT_CALLS = 20  # routing.conf's default


@dataclass(frozen=True)
class Retrained:
    at: int  # the call after which the candidate was trained
    new_labelled: int  # the stream's calls that were labelled by then (complete records)
    admitted: bool
    reason: str
    to_teacher: np.ndarray | None = None  # the candidate's routing of the rest of the stream


def as_logged(
    record: ReplayRecord, *, to_teacher: bool, fell_back: bool, sampled: bool, rate: float
) -> ReplayRecord:
    """The record as the ledger knows it (see the module docstring)."""
    meta = {**record.meta, "sample_rate": rate} if sampled else dict(record.meta)
    student = record.student
    if fell_back:
        return replace(record, meta=dict(record.meta))
    if to_teacher:
        return replace(record, student=student if sampled else None, meta=meta)
    if sampled or student is None:
        return replace(record, meta=meta)
    unknown = Outcome(student.verdict, None, student.cost_usd, student.latency_ms)
    return replace(record, student=unknown, teacher=None, meta=meta)


def logged_stream(
    records: list[ReplayRecord],
    sim: dict[str, np.ndarray],
    to_teacher: np.ndarray,
    rates: list[float],
    seed: int,
) -> list[ReplayRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i, record in enumerate(records):
        sampled = bool(rng.random() < rates[i])
        fell_back = bool(sim["fallback"][i])
        out.append(
            as_logged(
                record, to_teacher=bool(to_teacher[i]), fell_back=fell_back, sampled=sampled, rate=rates[i]
            )
        )
    return out


def retrain(
    old: list[ReplayRecord],
    logged: list[ReplayRecord],
    rest: list[ReplayRecord],
    *,
    featurizer: Featurizer,
    target: Target,
    since: int = 0,
) -> Retrained:
    """Train on ``old`` + ``logged`` (the ledger at the flag), admit on its held-out shard, and route
    ``rest`` with the candidate when admitted."""
    at = len(logged)
    new_labelled = sum(1 for r in logged[since:] if r.complete)
    new = {id(r) for r in logged[since:]}  # the calls since the drift was found (ProfileDrift.since)
    train, calib, heldout = split([*old, *logged])
    recent_records = [r for r in heldout if r.complete and id(r) in new]
    if len(recent_records) < MIN_HELDOUT_CALLS:  # admission would refuse: checked before training
        why = refusal(Recent(len(recent_records)), MIN_HELDOUT_CALLS, f"call {since}")
        return Retrained(at, new_labelled, False, why.split(" (the safe")[0])
    train = shift_weighted(train, lambda r: id(r) in new)  # as router_version_train after drift
    try:
        trained = train_and_calibrate(
            train, sample_weighted(calib), featurizer=featurizer, target=target, c_grid=(0.03, 0.3)
        )
    except ValueError as exc:
        return Retrained(at, new_labelled, False, f"cannot train: {exc}")
    if not trained.calibration.met:
        return Retrained(at, new_labelled, False, f"calibration: {trained.calibration.reason}")
    weighted = sample_weighted(heldout)
    distinct = sum(1 for r in heldout if r.complete)
    if distinct < MIN_HELDOUT_CALLS:
        return Retrained(at, new_labelled, False, f"only {distinct} labelled held-out calls")
    data = PolicyData.from_records(weighted)
    held = policy_metrics(
        "learned", data, trained.model.score_many(featurize(weighted, featurizer)) >= trained.threshold
    )
    required = target.required(float(data.t_ok.mean()))
    if held.pass_rate < required - 1e-12:
        return Retrained(at, new_labelled, False, f"held-out pass {held.pass_rate:.3f} < {required:.3f}")
    routed_recent = np.zeros(len(recent_records), dtype=bool)
    if recent_records:
        routed_recent = trained.model.score_many(featurize(recent_records, featurizer)) >= trained.threshold
    recent = recent_numbers(recent_records, routed_recent, target)
    why = refusal(recent, MIN_HELDOUT_CALLS, f"call {since}")
    if why:
        return Retrained(at, new_labelled, False, why.split(" (the safe")[0])
    routed = trained.model.score_many(featurize(rest, featurizer)) >= trained.threshold if rest else None
    return Retrained(
        at,
        new_labelled,
        True,
        f"admitted (held-out pass {held.pass_rate:.3f}; {recent.calls} of the stream's at "
        f"{recent.pass_rate:.3f}, bound {recent.margin:+.3f})",
        routed,
    )


def retrain_until_admitted(
    old: list[ReplayRecord],
    logged: list[ReplayRecord],
    records: list[ReplayRecord],
    first: int,
    every: int,
    *,
    featurizer: Featurizer,
    target: Target,
) -> tuple[Retrained, int]:
    """The retrain the first flag queues at call ``first``, then one every ``every`` calls (the beat's
    ``router_retrain_due``: the profile has newer calls) while refused, each on the ledger as it stands
    (``logged``: the whole stream as served and sampled, read up to the attempt). Returns the last
    attempt and how many were made."""
    attempts, at = 0, first
    done = Retrained(first, 0, False, "not tried")
    while at < len(records):
        attempts += 1
        done = retrain(old, logged[:at], records[at:], featurizer=featurizer, target=target, since=first)
        if done.admitted:
            break
        at += every
    return done, attempts


def served_after(
    data: PolicyData, sim: dict[str, np.ndarray], at: int, to_teacher: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(ok, cost) of the stream when the calls from ``at`` on are routed by ``to_teacher`` (theirs)."""
    ok, cost = sim["ok"].astype(bool).copy(), sim["cost"].astype(float).copy()
    later = data.simulate(np.concatenate([np.zeros(at, dtype=bool), to_teacher]))
    ok[at:], cost[at:] = later["ok"][at:], later["cost"][at:]
    return ok, cost


__all__ = [
    "Retrained",
    "TrainedRouter",
    "logged_stream",
    "retrain",
    "retrain_until_admitted",
    "served_after",
]
