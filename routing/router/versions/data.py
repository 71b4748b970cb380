"""Reads for the router versions: the profile's ledger rows as replay records, and the held-out split."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

from routing import conf
from routing.ledger import HAS_BODY
from routing.models import Invocation, TaskProfile
from routing.router.learning.calibration import EVAL_SPLIT, Split
from routing.router.learning.features import FeatureSpec, default_spec, hashing_spec, minilm_spec
from routing.router.learning.records import ReplayRecord, record_from_invocation
from routing.router.versions.precision import verifier_precision

# Shards by hash of the task id: 0-2 train the model, 3 calibrates the threshold, 4 is held out
# for admission. A task's calls never straddle two parts.
VERSION_SPLIT: Split = EVAL_SPLIT
MAX_COPIES = 100
MAX_RECENCY_WEIGHT = 10  # a labelled call of the new traffic trains as at most this many of the old


def ledger_records(
    *, profile: TaskProfile, until: dt.datetime | None = None, limit: int | None = None
) -> list[ReplayRecord]:
    """The newest ``limit`` calls of the profile (up to ``until``) that still hold their request
    (purged and hash-only rows have no text to learn from), oldest first. The verifier's pass is a
    label only when its measured precision is strong (``truth.verifier_precision``)."""
    rows = Invocation.objects.filter(HAS_BODY, profile=profile).select_related("profile")
    if until is not None:
        rows = rows.filter(created_at__lte=until)
    limit = limit or conf.get().router.max_training_calls
    newest = list(rows.order_by("-created_at", "-pk")[:limit])
    trusted = verifier_precision(profile).strong
    return [record_from_invocation(row, trusted_verifier=trusted) for row in reversed(newest)]


def sample_weighted(records: Sequence[ReplayRecord]) -> list[ReplayRecord]:
    """Complete records (both legs, the student's labelled), each repeated 1/rate times when a
    background sample at that rate completed it: the calls sampled stand for those that were not, so a
    policy replayed on them sees the traffic's real mix (every failed student call is complete, only a
    sample of the passed ones is). A sample whose comparison left the student's answer unknown is not
    complete, so it is never weighted up as a pass."""
    out: list[ReplayRecord] = []
    for record in records:
        if not record.complete:
            continue
        rate = record.meta.get("sample_rate")
        copies = max(1, min(MAX_COPIES, round(1 / rate))) if rate else 1
        out.extend([record] * copies)
    return out


def shift_weighted(
    records: Sequence[ReplayRecord],
    is_recent: Callable[[ReplayRecord], bool],
    max_weight: int = MAX_RECENCY_WEIGHT,
) -> list[ReplayRecord]:
    """Training records after a shift: each labelled call of the new traffic (``is_recent``) repeated so
    that the new traffic weighs about as much as the old (old / new labelled calls, 1 to ``max_weight``
    copies), so the model learns the new odds from the few calls the samples have labelled so far
    without forgetting what the old ones still teach. Copies share their task id: grouped
    cross-validation never splits them."""
    labelled = [r for r in records if r.needs_teacher is not None]
    new = sum(1 for r in labelled if is_recent(r))
    if not new:
        return list(records)
    weight = max(1, min(max_weight, round((len(labelled) - new) / new)))
    out: list[ReplayRecord] = []
    for record in records:
        out.extend([record] * (weight if record.needs_teacher is not None and is_recent(record) else 1))
    return out


Parts = tuple[list[ReplayRecord], list[ReplayRecord], list[ReplayRecord]]


def split(records: Sequence[ReplayRecord]) -> Parts:
    """(train, calibrate, held out)."""
    return VERSION_SPLIT.parts(records)


def configured_spec() -> FeatureSpec:
    kind = conf.get().router.features
    makers = {"auto": default_spec, "minilm": minilm_spec, "hashing": hashing_spec}
    if kind not in makers:
        raise ValueError(f"SKILLGATE_ROUTER_FEATURES must be one of {', '.join(makers)}, not {kind!r}")
    return makers[kind]()
