"""The shift benchmark's drift watch (``bench/router_shift_watch.py``) replays a held version's release.

Held (correctness leaning towards drift while the teacher share drifted), the version serves nothing; the
student answers it would have served are labelled again from the safe policy's samples
(``drift.held_labels``), and the hold ends as the project's check ends it: released when the correctness
test accepts H0, a stop when it decides drift; with ``release=False``, as replayed before, it lasts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import numpy as np

from bench.router_shift_watch import Watch, watch_stream
from routing.router.learning.evaluate import TrainedRouter

CALLS = 300
PREDICTED = SimpleNamespace(
    student_pass_rate=0.9,
    student_served_share=1.0,
    fallback_rate=0.05,
    margin=None,  # no slack known: the drift test's H1 is the whole pass margin
    cost_usd=0.001,
    teacher_share=0.3,  # the version sends none to the teacher live: the teacher share drifts at once
)
TRAINED = cast(TrainedRouter, SimpleNamespace(calibration=SimpleNamespace(chosen=PREDICTED, n=100_000)))


def _watch(later_ok: bool, *, release: bool = True):
    """9 wrong answers in the first 50 (correctness leans towards drift, undecided: held at 50), then
    every answer right (``later_ok``) or wrong."""
    ok = np.ones(CALLS, dtype=bool)
    ok[:50:6] = False
    assert int((~ok[:50]).sum()) == 9
    if not later_ok:
        ok[50:] = False
    sim = {"ok": ok, "fallback": np.zeros(CALLS, dtype=bool), "cost": np.full(CALLS, 0.001)}
    to_teacher = np.zeros(CALLS, dtype=bool)
    prompts = [100.0] * CALLS
    watch = Watch(sample_rate=1.0, release=release)
    return watch_stream(sim, to_teacher, prompts, TRAINED, prompts, watch, seed=1)


def test_a_held_version_measured_again_as_predicted_is_released_and_serves_again():
    seen = _watch(later_ok=True)

    assert seen.first == 50 and "teacher share" in seen.which
    assert seen.holds == (50,) and seen.releases and seen.releases[0] > 50
    assert seen.stop is None and not seen.held and seen.out_at is None
    released = seen.releases[0]
    assert not any(seen.served[50:released]) and all(seen.served[released:])  # teacher while held
    assert seen.student_labels > 50  # labelled again while held, from the safe policy's samples
    assert f"held; released at {released}" in seen.story()


def test_a_held_version_measured_again_as_wrong_stops():
    seen = _watch(later_ok=False)

    assert seen.holds == (50,) and not seen.releases
    assert seen.stop is not None and seen.stop > 50 and seen.out_at == seen.stop
    assert not any(seen.served[50:])
    assert seen.story().endswith(f"held; stops at {seen.stop}")


def test_without_the_release_replayed_a_hold_lasts_to_the_end():
    seen = _watch(later_ok=True, release=False)

    assert seen.holds == (50,) and not seen.releases and seen.stop is None
    assert seen.held and seen.out_at == 50 and not any(seen.served[50:])
    assert seen.student_labels == 50  # nothing measured it again


def _stopped_then(later_ok: bool, *, readmit: bool = True, calls: int = 600):
    """Every second answer wrong in the first 50 calls (correctness drifts: stopped at 50), then every
    answer right (``later_ok``) or right 0.8 of the time, under the floor of 0.9 (no slack known)."""
    ok = np.ones(calls, dtype=bool)
    ok[:50:2] = False
    if not later_ok:
        ok[50::5] = False
    sim = {"ok": ok, "fallback": np.zeros(calls, dtype=bool), "cost": np.full(calls, 0.001)}
    prompts = [100.0] * calls
    watch = Watch(sample_rate=1.0, readmit=readmit)
    return watch_stream(sim, np.zeros(calls, dtype=bool), prompts, TRAINED, prompts, watch, seed=1)


def test_a_stopped_version_measured_again_as_predicted_is_readmitted_with_a_fresh_window():
    """The answers it would have served since the stop, sampled at the wanted student rate (0.5), all
    right: re-admitted once ``meets_sprt`` shows them above 0.9, and it serves from then on (its live
    window afresh: the wrong answers that stopped it do not stop it again)."""
    seen = _stopped_then(later_ok=True)

    assert seen.stops == (50,) and len(seen.readmits) == 1 and seen.stop is None and seen.out_at is None
    back = seen.readmits[0]
    assert 50 < back <= 200, back
    assert not any(seen.served[50:back]) and all(seen.served[back:])
    assert seen.story().endswith(f"stops; re-admitted at {back}")


def test_a_stopped_version_measured_again_below_the_floor_stays_stopped():
    seen = _stopped_then(later_ok=False)
    assert seen.stops == (50,) and not seen.readmits and seen.stop == 50 and not any(seen.served[50:])
    before = _stopped_then(later_ok=True, readmit=False)  # as replayed before: a stop lasts
    assert before.stop == 50 and not before.readmits and not any(before.served[50:])
