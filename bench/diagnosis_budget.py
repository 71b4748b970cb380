"""Where the analyzers-only planner's step budget goes, on the four replay sets: per case the reads made,
whether the budget (``DIAGNOSTICS_MAX_PROBES``) ran out, and the reads still queued when it did (cut).

    .venv/bin/python -m bench.diagnosis_budget                  # a summary per set, and each cut case
    .venv/bin/python -m bench.diagnosis_budget --json out.json  # and every case's numbers and cut reads

Keyword-graded like ``diagnose_replay --no-llm --grader keyword``, so its pass counts are that command's.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from diagnostics.agent.investigation.observer import SUBMIT, Decision, InvestigationView
from diagnostics.agent.questions.planner import QuestionPlanner
from diagnostics.evaluation.replay import evaluate

ROOT = Path(__file__).resolve().parent.parent
SETS = ["issue39/cases", "holmesgpt/cases", "handwritten/cases", "issue39/questions"]


class _Counted(QuestionPlanner):
    """The analyzers-only Observer of ``diagnose_replay --no-llm``, noting whether it submitted."""

    submitted = False

    def decide(self, view: InvestigationView) -> Decision:
        decision = super().decide(view)
        self.submitted = self.submitted or decision.kind == SUBMIT
        return decision


def measure(folder: str) -> list[dict[str, Any]]:
    made: list[_Counted] = []

    def factory() -> _Counted:
        made.append(_Counted())
        return made[-1]

    rows = []
    runs = evaluate([ROOT / "eval" / folder], mode="analyzers", grader="keyword", observer_factory=factory)
    for run, planner in zip(runs, made, strict=True):
        cut = [] if planner.submitted else sorted(planner._heap)
        rows.append(
            {
                "set": folder,
                "case": run.case,
                "passed": run.passed,
                "calls": len(run.tool_calls),
                "exhausted": not planner.submitted,
                "cut": [f"{t.tool} {json.dumps(t.params, sort_keys=True)} ({t.purpose})" for t in cut],
            }
        )
    return rows


def summary(rows: list[dict[str, Any]], label: str) -> str:
    calls = [r["calls"] for r in rows]
    ran_out, cut = sum(r["exhausted"] for r in rows), sum(len(r["cut"]) for r in rows)
    buckets = Counter(min(c // 10 * 10, 40) for c in calls)
    return (
        f"{label}: {sum(r['passed'] for r in rows)}/{len(rows)} passed; reads mean "
        f"{statistics.mean(calls):.1f}, median {statistics.median(calls):g}, max {max(calls)}; "
        f"budget ran out in {ran_out}; reads cut {cut}; by tens "
        f"{dict(sorted(buckets.items()))}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", dest="json_out", help="Write every case's numbers and cut reads here.")
    args = parser.parse_args()
    rows = [row for folder in SETS for row in measure(folder)]
    for folder in SETS:
        part = [r for r in rows if r["set"] == folder]
        print(summary(part, folder))
        for row in (r for r in part if r["exhausted"]):
            print(f"  {row['case']}: {row['calls']} reads, {len(row['cut'])} cut")
    print(summary(rows, "all"))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
