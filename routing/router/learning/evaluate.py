"""Train, calibrate and evaluate the learned router against the baselines and the oracle."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from routing.router.learning import baselines
from routing.router.learning.calibration import (
    EVAL_SPLIT,
    CalibrationResult,
    CurvePoint,
    PolicyData,
    Split,
    Target,
    calibrate,
    sweep,
)
from routing.router.learning.features import CallInput, Featurizer
from routing.router.learning.metrics import PolicyMetrics, oracle_metrics, policy_metrics
from routing.router.learning.model import LearnedRouterModel, fit_router_model
from routing.router.learning.records import ReplayRecord


def featurize(records: Sequence[ReplayRecord], featurizer: Featurizer) -> np.ndarray:
    return featurizer.transform_many([CallInput.from_record(r) for r in records])


@dataclass
class TrainedRouter:
    model: LearnedRouterModel
    calibration: CalibrationResult

    @property
    def threshold(self) -> float:
        return self.calibration.threshold

    def version_fields(self) -> dict[str, Any]:
        """What a RouterVersion row stores (all JSON)."""
        return {
            "model": self.model.to_json(),
            "feature_spec": self.model.feature_spec.to_json(),
            "threshold": self.calibration.threshold,
            "target": self.calibration.target.to_json(),
            "calibration": self.calibration.to_json(),
        }


def train_and_calibrate(
    train: Sequence[ReplayRecord],
    calib: Sequence[ReplayRecord],
    *,
    featurizer: Featurizer,
    target: Target,
    c_grid: tuple[float, ...] = (0.003, 0.01, 0.03, 0.1),
    seed: int = 0,
    cross_fit: bool = True,
) -> TrainedRouter:
    """Fit on ``train``, choose the threshold on ``calib``. ``cross_fit``: the complete training
    calls join the calibration set with their out-of-fold scores (grouped CV), so the confidence
    margin, sized to the set, is not that of one shard alone. They are not sample-weighted as the
    ledger's calibration shard is: complete calls over-represent student failures, which only
    makes the threshold more cautious."""
    labelled = [r for r in train if r.needs_teacher is not None]
    complete = [r for r in calib if r.complete]
    if not labelled or not complete:
        raise ValueError(
            f"need labelled training calls ({len(labelled)}) and complete calibration calls ({len(complete)})"
        )
    x = featurize(labelled, featurizer)
    y = np.asarray([bool(r.needs_teacher) for r in labelled], dtype=int)
    groups = np.asarray([r.task_id for r in labelled])
    model = fit_router_model(x, y, groups, spec=featurizer.spec, c_grid=c_grid, seed=seed)
    scores = model.score_many(featurize(complete, featurizer))
    if cross_fit and model.oof_scores is not None:
        pairs = [(r, s) for r, s in zip(labelled, model.oof_scores.tolist(), strict=True) if r.complete]
        complete = [*complete, *(r for r, _ in pairs)]
        scores = np.concatenate([scores, [s for _, s in pairs]])
    return TrainedRouter(model, calibrate(PolicyData.from_records(complete), scores, target))


def train_router(
    records: Sequence[ReplayRecord], *, featurizer: Featurizer, target: Target, split: Split | None = None
) -> TrainedRouter:
    """Production: shards 0-3 train, shard 4 calibrates (by hash of the task id)."""
    train, calib, _ = (split or Split()).parts(records)
    return train_and_calibrate(train, calib, featurizer=featurizer, target=target)


@dataclass
class EvalReport:
    name: str
    target: Target
    rows: list[PolicyMetrics]  # learned, baselines, oracle
    router: TrainedRouter
    test_curve: list[CurvePoint] = field(repr=False)
    prompt_curve: list[CurvePoint] = field(repr=False)
    required_pass_rate: float = 0.0
    max_p95_ms: float | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    at_same_pass: dict[str, float] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)

    def row(self, prefix: str) -> PolicyMetrics:
        return next(r for r in self.rows if r.name.startswith(prefix))


def cheapest_at(curve: Sequence[CurvePoint], pass_rate: float, max_p95: float | None = None) -> float:
    ok = [
        p.cost_rel
        for p in curve
        if p.pass_rate >= pass_rate - 1e-12 and (max_p95 is None or p.p95_ms <= max_p95)
    ]
    return min(ok) if ok else float("nan")


def evaluate(
    train: Sequence[ReplayRecord],
    calib: Sequence[ReplayRecord],
    test: Sequence[ReplayRecord],
    *,
    featurizer: Featurizer,
    target: Target,
    name: str = "replay",
    seed: int = 0,
    c_grid: tuple[float, ...] = (0.003, 0.01, 0.03, 0.1),
) -> EvalReport:
    router = train_and_calibrate(train, calib, featurizer=featurizer, target=target, seed=seed, c_grid=c_grid)
    test = [r for r in test if r.complete]
    data = PolicyData.from_records(test)
    scores = router.model.score_many(featurize(test, featurizer))
    threshold = router.threshold
    learned = policy_metrics("learned (MERA)", data, scores >= threshold, scores=scores, threshold=threshold)
    prompt = baselines.PromptOnlyRouter(seed=seed).fit([r for r in train if r.needs_teacher is not None])
    prompt.calibrate([r for r in calib if r.complete], target)
    rows = [
        learned,
        *baselines.baseline_rows(data, share=learned.teacher_share, prompt_only=prompt, test=test),
    ]
    oracle = oracle_metrics(data)
    rows.append(oracle)
    required = target.required(float(data.t_ok.mean()))
    test_curve = sweep(data, scores, Target(target.pass_rate, target.relative, target.max_p95_ms, 0.0))
    prompt_curve = sweep(data, prompt.scores(test), Target(target.pass_rate, target.relative, None, 0.0))
    report = EvalReport(
        name=name,
        target=target,
        rows=rows,
        router=router,
        test_curve=test_curve,
        prompt_curve=prompt_curve,
        required_pass_rate=required,
        max_p95_ms=target.max_p95_ms,
        sizes={"train": len(train), "calibrate": len(calib), "test": len(test)},
    )
    for row in rows[1:-1]:
        report.at_same_pass[row.name] = cheapest_at(test_curve, row.pass_rate)
    report.checks = {
        "calibration_met": router.calibration.met,
        "meets_target_on_test": learned.pass_rate >= required - 1e-12,
        "meets_latency_on_test": target.max_p95_ms is None or learned.p95_ms <= target.max_p95_ms,
        "cost_vs_oracle": learned.cost_usd / oracle.cost_usd - 1 if oracle.cost_usd else float("nan"),
        "within_15pct_of_oracle": learned.cost_usd <= 1.15 * oracle.cost_usd,
        "below_every_baseline_at_same_pass": all(
            report.at_same_pass[r.name] <= r.cost_rel + 1e-9
            for r in rows[1:-1]
            if not math.isnan(report.at_same_pass[r.name])
        ),
        "cheaper_than_baselines_meeting_target": all(
            learned.cost_rel <= r.cost_rel + 1e-9
            for r in rows[1:-1]
            if r.pass_rate >= required and (target.max_p95_ms is None or r.p95_ms <= target.max_p95_ms)
        ),
    }
    return report


def evaluate_replay(
    records: Sequence[ReplayRecord],
    *,
    featurizer: Featurizer,
    target: Target,
    split: Split = EVAL_SPLIT,
    name: str = "replay",
) -> EvalReport:
    """One replay file: shards 0-2 train, 3 calibrates, 4 is held out (by hash of the task id)."""
    train, calib, test = split.parts(records)
    return evaluate(train, calib, test, featurizer=featurizer, target=target, name=name)


def routing_latency(
    router: TrainedRouter, featurizer: Featurizer, records: Sequence[ReplayRecord], *, cold: bool = False
) -> dict[str, float]:
    """Wall and CPU time of routing one call (CallInput, features incl. embedding, score,
    threshold), one at a time. ``cold`` clears the context-embedding cache before each call."""
    wall, cpu = [], []
    for record in records:
        if cold and featurizer.embedder is not None:
            featurizer.embedder.clear_cache()
        started, started_cpu = time.perf_counter(), time.thread_time()
        score = router.model.score(featurizer.transform(CallInput.from_record(record)))
        _ = score >= router.threshold
        cpu.append((time.thread_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    return {
        "p50_ms": float(np.percentile(wall, 50)),
        "p95_ms": float(np.percentile(wall, 95)),
        "cpu_p50_ms": float(np.percentile(cpu, 50)),
        "cpu_p95_ms": float(np.percentile(cpu, 95)),
        "calls": float(len(records)),
    }


def _fmt(value: float | None, pct: bool = False, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value * 100:.1f}%" if pct else f"{value:.{digits}f}"


def markdown(report: EvalReport) -> str:
    head = (
        "| policy | pass rate | cost vs teacher | learned @ same pass | fallback | teacher share | P50 ms | "
        "P95 ms | precision | recall | F1 | APGR | CPT(50%) | CPT(80%) |"
    )
    lines = [head, "|" + "---|" * 14]
    for row in report.rows:
        same = report.at_same_pass.get(row.name)
        cells = [
            row.name,
            _fmt(row.pass_rate, True),
            _fmt(row.cost_rel),
            _fmt(same),
            _fmt(row.fallback_rate, True),
            _fmt(row.teacher_share, True),
            f"{row.p50_ms:.0f}",
            f"{row.p95_ms:.0f}",
            _fmt(row.precision, digits=2),
            _fmt(row.recall, digits=2),
            _fmt(row.f1, digits=2),
            _fmt(row.apgr, digits=3),
            _fmt(row.cpt50 / 100 if not math.isnan(row.cpt50) else None, True),
            _fmt(row.cpt80 / 100 if not math.isnan(row.cpt80) else None, True),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(report: EvalReport) -> str:
    cal = report.router.calibration
    c = report.checks
    parts = [
        f"target {report.target.describe()} -> pass rate >= {report.required_pass_rate:.3f} on the "
        f"test calls; threshold {cal.threshold:.4f} ({cal.reason})",
        f"met on test: {c['meets_target_on_test']}; latency bound met: {c['meets_latency_on_test']}; "
        f"cost vs oracle: {c['cost_vs_oracle']:+.1%} (within 15%: {c['within_15pct_of_oracle']}); "
        f"below every baseline at the same pass rate: {c['below_every_baseline_at_same_pass']}",
        f"calls: train {report.sizes['train']}, calibrate {report.sizes['calibrate']}, "
        f"test {report.sizes['test']}",
    ]
    if report.latency:
        lat = report.latency
        parts.append(
            f"routing one call: P50 {lat['p50_ms']:.2f} ms, P95 {lat['p95_ms']:.2f} ms wall "
            f"(CPU P50 {lat['cpu_p50_ms']:.2f} ms)"
        )
    return "\n".join(f"- {p}" for p in parts)
