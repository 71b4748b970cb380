"""Shared synthetic replays and one trained router, built once per session (hashed n-grams: fast)."""

from __future__ import annotations

import pytest

from bench.router_data.synthetic import generate
from routing.router.learning.calibration import Split, Target
from routing.router.learning.evaluate import EvalReport, evaluate
from routing.router.learning.features import Featurizer, hashing_spec, make_featurizer
from routing.router.learning.records import ReplayRecord

FAST_GRID = (0.01, 0.1)


@pytest.fixture(scope="session")
def featurizer() -> Featurizer:
    return make_featurizer(hashing_spec(ngram_dims=256))


@pytest.fixture(scope="session")
def mixed_records() -> list[ReplayRecord]:
    return generate(1800, regime="mixed", seed=11)


@pytest.fixture(scope="session")
def mixed_test() -> list[ReplayRecord]:
    return generate(1500, regime="mixed", seed=12)


@pytest.fixture(scope="session")
def mixed_report(
    mixed_records: list[ReplayRecord], mixed_test: list[ReplayRecord], featurizer: Featurizer
) -> EvalReport:
    train, calib, _ = Split().parts(mixed_records)
    return evaluate(
        train,
        calib,
        mixed_test,
        featurizer=featurizer,
        target=Target(0.97, True, None, 1.0),
        c_grid=FAST_GRID,
    )
