"""Run the agent on recorded cases (the replay environment) and grade the diagnoses."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.investigation.llm import GatewayClient
from diagnostics.agent.investigation.observer import Observer
from diagnostics.agent.investigation.skills import SkillEntry
from diagnostics.agent.request.intent import INTENTS
from diagnostics.agent.runner import MemoryRecorder, build_observer_for, investigate
from diagnostics.evaluation import metrics
from diagnostics.evaluation.cases import SPLITS, Case, discover_cases
from diagnostics.evaluation.grading import Grade, grade
from diagnostics.toolsets.replay import ReplayEnvironment


@dataclass
class CaseRun:
    case: str
    run: int
    mode: str
    split: str = ""
    diagnosis: str = ""
    findings: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    no_data_calls: int = 0
    proposals: list[dict[str, Any]] = field(default_factory=list)
    grade: Grade | None = None
    seconds: float = 0.0
    error: str = ""
    # The case's tagged intent, else the one the agent classified; the answer shape it gave.
    intent: str = ""
    answer: dict[str, Any] = field(default_factory=dict)
    healthy: bool | None = None
    # The tool-calling Observer's run: {"kept": bool, "reason": ..., "turns": ...}; {} without one.
    observer: dict[str, Any] = field(default_factory=dict)

    @property
    def empty_reads(self) -> bool:
        """Every tool call of the run came back without data."""
        calls = self.tool_calls
        return bool(calls) and all(c.get("no_data") or not c.get("ok", True) for c in calls)

    @property
    def says_healthy(self) -> bool:
        text = self.diagnosis.lower()
        return self.healthy is True or "appears healthy" in text or "workload_healthy: true" in text

    @property
    def passed(self) -> bool:
        return bool(self.grade and self.grade.passed)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "case": self.case,
            "diagnosis": self.diagnosis,
            "findings": self.findings,
            "tool_calls": self.tool_calls,
            "run": self.run,
            "mode": self.mode,
            "split": self.split,
            "no_data_calls": self.no_data_calls,
            "proposed_actions": self.proposals,
            "seconds": round(self.seconds, 3),
            "intent": self.intent,
            "answer": self.answer,
        }
        if self.observer:
            data["observer"] = self.observer
        if self.grade is not None:
            data["passed"] = self.grade.passed
            data["grading"] = self.grade.to_json()
        if self.error:
            data["error"] = self.error
        return data


def run_case(case: Case, *, run: int, mode: str, observer: Observer | None = None) -> CaseRun:
    started = time.perf_counter()
    environment = ReplayEnvironment({"case_dir": str(case.path)})
    result = CaseRun(case=case.name, run=run, mode=mode, split=case.split, intent=case.intent)
    try:
        outcome = investigate(
            alert=case.alert(),
            environment=environment,
            recorder=MemoryRecorder(),
            mode=mode,
            observer=observer,
        )
    except Exception as exc:  # one broken case must not stop the evaluation
        result.error = f"{type(exc).__name__}: {exc}"
        result.seconds = time.perf_counter() - started
        return result
    result.mode = outcome.mode
    result.diagnosis = outcome.diagnosis
    result.findings = [f.summary for f in outcome.findings]
    result.tool_calls = outcome.tool_calls
    result.no_data_calls = outcome.no_data_calls
    result.proposals = outcome.proposals
    result.answer = outcome.answer
    result.healthy = outcome.healthy
    result.observer = outcome.observer
    result.intent = result.intent or str(outcome.answer.get("intent") or "status")
    result.seconds = time.perf_counter() - started
    return result


def evaluate(
    root: Path | Sequence[Path],
    *,
    runs: int = 1,
    mode: str = "analyzers",
    judge: GatewayClient | None = None,
    grader: str = "auto",
    only: str = "",
    observer_factory: Callable[[], Observer] | None = None,
    progress: Callable[[CaseRun], None] | None = None,
    skills: Sequence[SkillEntry] = (),
) -> list[CaseRun]:
    """Runs every case under ``root`` (one folder or several; ``runs`` times each) and grades it.
    ``only``: cases whose name contains it, or every case of a split when it is a split's name. The
    Observer of each run comes from ``observer_factory``, else it is the one of ``mode`` (in LLM mode,
    with ``skills``)."""
    results = []
    roots = [root] if isinstance(root, Path) else list(root)
    for case in [c for r in roots for c in discover_cases(r)]:
        if only and not (only == case.split if only in SPLITS else only in case.name):
            continue
        for run in range(1, runs + 1):
            observer = observer_factory() if observer_factory else build_observer_for(mode, skills=skills)
            result = run_case(case, run=run, mode=mode, observer=observer)
            if case.expected is not None and not result.error:
                result.grade = grade(case.expected, result.diagnosis, judge=judge, mode=grader)
            results.append(result)
            if progress is not None:
                progress(result)
    return results


def by_case(results: list[CaseRun]) -> dict[str, list[bool]]:
    table: dict[str, list[bool]] = {}
    for result in results:
        if result.grade is not None or result.error:
            table.setdefault(result.case, []).append(result.passed)
    return table


def summary_line(results: list[CaseRun], *, runs: int, label: str = "") -> str:
    """Pass rate, best@k and avg@k of ``results``, prefixed by ``label``."""
    table = by_case(results)
    total = sum(len(v) for v in table.values())
    passed_runs = sum(sum(v) for v in table.values())
    prefix = f"{label:<9} " if label else ""
    return (
        f"{prefix}pass rate {metrics.pass_rate(table):.1%} ({passed_runs}/{total} graded runs)   "
        f"best@{runs} {metrics.best_at_k(table):.1%}   avg@{runs} {metrics.avg_at_k(table):.1%}   "
        f"cases {len(table)}"
    )


def intent_rows(results: list[CaseRun]) -> list[tuple[str, str, int, int]]:
    """(intent, split, passed, graded) for every intent and split with graded runs, intents in order."""
    rows = []
    for intent in INTENTS:
        for split in (*SPLITS, "all"):
            part = [
                r
                for r in results
                if r.intent == intent and (split == "all" or r.split == split) and (r.grade or r.error)
            ]
            if part:
                rows.append((intent, split, sum(r.passed for r in part), len(part)))
    return rows


def honesty(results: list[CaseRun]) -> tuple[int, int]:
    """(runs whose every read was empty, how many of them still said "healthy")."""
    empty = [r for r in results if r.empty_reads]
    return len(empty), sum(r.says_healthy for r in empty)


def render_intents(results: list[CaseRun], *, label: str = "") -> str:
    """Pass rate per intent and split, and the "no data" honesty line, as a Markdown table."""
    lines = [
        f"| intent{f' ({label})' if label else ''} | split | passed | rate |",
        "| --- | --- | ---: | ---: |",
    ]
    for intent, split, passed, graded in intent_rows(results):
        lines.append(f"| {intent} | {split} | {passed}/{graded} | {passed / graded:.0%} |")
    empty, healthy = honesty(results)
    lines.append("")
    lines.append(
        f"No-data honesty: {empty} runs read nothing but empty results; {healthy} of them said 'healthy'."
    )
    return "\n".join(lines)


def render_table(results: list[CaseRun], *, runs: int) -> str:
    cases: dict[str, list[CaseRun]] = {}
    for result in results:
        cases.setdefault(result.case, []).append(result)
    width = max([len(name) for name in cases] + [4])
    lines = [
        f"{'case':<{width}}  {'split':<8}  {'passed':>6}  {'facts':>5}  {'calls':>5}  "
        f"{'no-data':>7}  {'judge':>5}"
    ]
    for name, case_runs in cases.items():
        graded = [r for r in case_runs if r.grade is not None]
        passed = sum(r.passed for r in case_runs)
        last = case_runs[-1]
        facts = "-"
        judge = "-"
        if last.grade is not None:
            facts = f"{sum(f.passed for f in last.grade.facts)}/{len(last.grade.facts)}"
            if last.grade.judge and last.grade.judge.get("available"):
                judge = "pass" if last.grade.judge.get("passed") else "fail"
        shown = f"{passed}/{len(case_runs)}" if graded or last.error else "n/a"
        if last.error:
            facts = "error"
        lines.append(
            f"{name:<{width}}  {last.split:<8}  {shown:>6}  {facts:>5}  {len(last.tool_calls):>5}  "
            f"{last.no_data_calls:>7}  "
            f"{judge:>5}"
        )
    lines.append("")
    for split in SPLITS:
        part = [r for r in results if r.split == split]
        if part:
            lines.append(summary_line(part, runs=runs, label=split))
    lines.append(summary_line(results, runs=runs, label="all"))
    lines += ["", render_intents(results)]
    return "\n".join(lines)


def render_comparison(base: list[CaseRun], llm: list[CaseRun], *, label: str = "LLM") -> str:
    """Analyzers-only next to LLM mode per intent and split (Markdown), how many of the LLM's answers were
    kept (the evidence check passed), and the cases where LLM mode is better or worse."""
    lines = [
        f"| intent | split | analyzers-only | {label} | {label} answers kept |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    base_rows = {(i, s): (p, g) for i, s, p, g in intent_rows(base)}
    for intent, split, passed, graded in intent_rows(llm):
        was, of = base_rows.get((intent, split), (0, 0))
        part = [r for r in llm if r.intent == intent and (split == "all" or r.split == split)]
        with_agent = [r for r in part if r.observer]
        n_kept = sum(bool(r.observer.get("kept")) for r in with_agent)
        kept = f"{n_kept}/{len(with_agent)}" if with_agent else "-"
        lines.append(f"| {intent} | {split} | {was}/{of} | {passed}/{graded} | {kept} |")
    with_llm, without = by_case(llm), by_case(base)
    better = sorted(c for c in with_llm if any(with_llm[c]) and not any(without.get(c, [])))
    worse = sorted(c for c in without if any(without[c]) and not any(with_llm.get(c, [])))
    reasons: dict[str, int] = {}
    for run in llm:
        if run.observer and not run.observer.get("kept"):
            why = str(run.observer.get("reason") or "")
            head, _, problems = why.partition(": ")
            kinds = dict.fromkeys(rx.sub(r"'[^']*'", "'…'", p) for p in problems.split("; ") if p)
            key = f"{head}: {'; '.join(kinds)}" if "evidence check" in head else why[:160]
            reasons[key] = reasons.get(key, 0) + 1
    lines += [
        "",
        f"{label} better on: {', '.join(better) or 'none'}",
        f"{label} worse on: {', '.join(worse) or 'none'}",
    ]
    if reasons:
        shown = "; ".join(f"{n}x {why}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:6])
        lines.append(f"{label} answers not kept, why: {shown}")
    return "\n".join(lines)
