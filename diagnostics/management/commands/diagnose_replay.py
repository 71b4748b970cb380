"""Run the diagnosis agent on recorded cases and grade it: pass rate, best@k, avg@k."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from diagnostics import conf
from diagnostics.agent.runner import MODE_ANALYZERS, MODE_LLM
from diagnostics.evaluation.cases import SPLITS
from diagnostics.evaluation.grading import judge_client
from diagnostics.evaluation.replay import (
    CaseRun,
    evaluate,
    render_comparison,
    render_table,
    summary_line,
)
from diagnostics.recording import observer_skills


class Command(BaseCommand):
    help = (
        "Run the agent on every case folder under --cases (replay environment: recorded tool outputs only) "
        "and grade each diagnosis against the case's expected facts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--cases",
            required=True,
            action="append",
            help="Folder of case folders (e.g. eval/holmesgpt/cases); repeat it for several.",
        )
        parser.add_argument("--runs", type=int, default=1, help="Runs per case (k of best@k / avg@k).")
        parser.add_argument("--json", dest="json_out", help="Write the per-run results (a JSON list) here.")
        parser.add_argument(
            "--no-llm", action="store_true", help="Analyzers only: no LLM for the agent or the judge."
        )
        parser.add_argument(
            "--grader",
            choices=["auto", "keyword", "judge", "all"],
            default="auto",
            help="auto: keyword check, plus the LLM judge (both must pass) when an LLM is configured.",
        )
        parser.add_argument(
            "--compare",
            action="store_true",
            help="In LLM mode, also run analyzers-only on the same cases; say where the LLM is better or "
            "worse.",
        )
        parser.add_argument(
            "--case",
            default="",
            help="Only cases whose path contains this text, or only one split: 'dev' or 'held-out'.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        roots = [Path(folder).expanduser() for folder in options["cases"]]
        for root in roots:
            if not root.is_dir():
                raise CommandError(f"--cases {root} is not a folder.")
        runs = int(options["runs"])
        if runs < 1:
            raise CommandError("--runs must be at least 1.")
        use_llm = not options["no_llm"] and conf.get().agent.llm_configured
        if not options["no_llm"] and not use_llm:
            self.stderr.write(f"No LLM configured ({conf.AGENT_KEY_ENV} is not set): running analyzers only.")
        mode = MODE_LLM if use_llm else MODE_ANALYZERS
        judge = judge_client() if use_llm and options["grader"] != "keyword" else None
        grader = options["grader"] if judge is not None else "keyword"
        self.stdout.write(
            f"mode {mode}, grader {grader}, {runs} run(s) per case, cases under {', '.join(map(str, roots))}"
        )

        def progress(result: CaseRun) -> None:
            mark = (
                "error" if result.error else ("pass" if result.passed else ("fail" if result.grade else "-"))
            )
            self.stdout.write(f"  {result.case} run {result.run}: {mark} ({len(result.tool_calls)} calls)")

        skills = observer_skills(conf.get().agent.observer_profile) if use_llm else []
        results = evaluate(
            roots,
            runs=runs,
            mode=mode,
            judge=judge,
            grader=grader,
            only=options["case"],
            progress=progress,
            skills=skills,
        )
        if not results:
            raise CommandError(f"No case folders under {', '.join(map(str, roots))}.")
        self.stdout.write("")
        self.stdout.write(render_table(results, runs=runs))
        if options["compare"] and mode == MODE_LLM:
            self._compare(roots, results, runs=runs, only=options["case"])
        if options["json_out"]:
            out = Path(options["json_out"])
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps([r.to_json() for r in results], indent=2, ensure_ascii=False))
            self.stdout.write(f"wrote {out}")

    def _compare(self, roots: list[Path], llm: list[CaseRun], *, runs: int, only: str) -> None:
        """Analyzers-only on the same cases, keyword-graded like the LLM runs were, next to LLM mode per
        intent (with how many of the tool-calling Observer's answers were kept)."""
        base = evaluate(roots, runs=runs, mode=MODE_ANALYZERS, grader="keyword", only=only)
        self.stdout.write("")
        self.stdout.write("analyzers-only on the same cases (keyword grader):")
        for split in SPLITS:
            part = [r for r in base if r.split == split]
            if part:
                self.stdout.write(summary_line(part, runs=runs, label=split))
        self.stdout.write("")
        self.stdout.write(render_comparison(base, llm))
