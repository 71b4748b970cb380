"""Named replays the router is evaluated on, from several sources.

- ``gen-*``: the project's generator (``bench.router_data.synthetic``) with other seeds, mixes
  and regimes than the benchmark's own; the router's design (features, pooling, margin) was tuned on
  ``gen-mixed``.
- ``bfcl``: BFCL v4's 1,240 tool-call items (``bench.router_replays.bfcl``): another source, other
  kinds of calls, BFCL's checker as the ground truth; not tuned on.
- ``bfcl-smollm2``: the same items and teacher, SmolLM2-135M's recorded answers as the student's
  (``bench.router_replays.bfcl_record``); not tuned on.
- ``bfcl-values``, ``bfcl-smollm2-values``: the same two, with the verified profile's live check the
  stronger ``values`` one (bench.bfcl.judge.LIVE_VERIFIERS: grounded values); its heuristics were
  written looking at SmolLM2's answers to the first 80 items of each category.
- ``he-mbpp``: HumanEval+MBPP (``bench.router_replays.he_mbpp``): SmolLM2-135M's recorded answers,
  the tasks' executed tests as the ground truth; not tuned on.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.bfcl.data import load_items
from bench.router_data.synthetic import MIX, REGIMES, Regime, generate
from bench.router_replays import bfcl, he_mbpp
from routing.router.learning.records import ReplayRecord

TUNED_ON = ("gen-mixed",)


def _regime(name: str, **mix: float) -> Regime:
    base = REGIMES[name]
    return Regime(base.name, base.description, base.verifiers, base.student_cost_ratio, None, {**MIX, **mix})


def _bfcl(verifier: str = "schema") -> list[ReplayRecord]:
    return [bfcl.record(item, verifier=verifier) for item in load_items()]


def _bfcl_smollm2(verifier: str = "schema") -> list[ReplayRecord]:
    return bfcl.smollm2_records(verifier=verifier)


def _he_mbpp() -> list[ReplayRecord]:
    return he_mbpp.records()


SOURCES: dict[str, tuple[str, Callable[[], list[ReplayRecord]]]] = {
    "gen-mixed": (
        "generator, mixed verifiers, seed 21, 3000 calls",
        lambda: generate(3000, regime="mixed", seed=21),
    ),
    "gen-weak-skewed": (
        "generator, weak verifiers, seed 31, a mix heavy on diagnosis and extraction",
        lambda: generate(
            3000,
            regime=_regime("weak_verifier", log_diagnosis=0.35, json_extract=0.3, tool_call=0.15),
            seed=31,
        ),
    ),
    "gen-noverify-noisy": (
        "generator, no verifiers, seed 41, less decided by the content (sharpness 1, noise 0.6)",
        lambda: generate(3000, regime="no_verifier", seed=41, sharpness=1.0, noise=0.6),
    ),
    "bfcl": ("BFCL v4 tool calls: rule-based student, BFCL checker (not tuned on)", _bfcl),
    "bfcl-smollm2": (
        "BFCL v4 tool calls: SmolLM2-135M's recorded answers, BFCL checker (not tuned on)",
        _bfcl_smollm2,
    ),
    "bfcl-values": (
        "BFCL v4 tool calls: rule-based student, the verified profile checks values (not tuned on)",
        lambda: _bfcl("values"),
    ),
    "bfcl-smollm2-values": (
        "BFCL v4 tool calls: SmolLM2-135M's answers, the verified profile checks values",
        lambda: _bfcl_smollm2("values"),
    ),
    "he-mbpp": ("HumanEval+MBPP: SmolLM2-135M's recorded answers, executed tests (not tuned on)", _he_mbpp),
}
