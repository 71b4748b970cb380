"""Diagnosis questions: pass rate per intent and split, and "no data" honesty, on the replay cases.

Runs ``diagnose_replay``'s evaluation (keyword grader) over ``eval/holmesgpt/cases`` and
``eval/handwritten/cases``, analyzers-only; with ``--llm`` (and an agent key configured,
SKILLGATE_AGENT_API_KEY) also in LLM mode on the same cases. Prints the table, writes it to
``bench/results/diagnosis_questions.md`` and puts it into ``docs/diagnosis.md`` between the
``bench:diagnosis_questions`` markers, so the docs never carry numbers copied by hand.

    .venv/bin/python -m bench.diagnosis_questions            # analyzers-only
    .venv/bin/python -m bench.diagnosis_questions --llm      # and LLM mode, through the gateway
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "bench/results/diagnosis_questions.md"
DOCS = ROOT / "docs/diagnosis.md"
MARKERS = ("<!-- bench:diagnosis_questions -->", "<!-- /bench:diagnosis_questions -->")


def _setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "app.settings")
    import django

    django.setup()


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", action="store_true", help="also run LLM mode (needs an agent key)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    _setup()
    from diagnostics.agent import config
    from diagnostics.evaluation.replay import evaluate, render_intents, summary_line

    roots = [ROOT / "eval/holmesgpt/cases", ROOT / "eval/handwritten/cases"]
    sections = []
    analyzers = evaluate(roots, mode="analyzers", grader="keyword")
    sections.append(("analyzers-only", analyzers))
    if args.llm:
        if not config.llm_configured():
            raise SystemExit(f"--llm: no agent key ({config.AGENT_KEY_ENV}) is configured.")
        sections.append(("LLM", evaluate(roots, mode="llm", grader="keyword")))
    out = [
        f"Measured {datetime.now(tz=UTC):%Y-%m-%d} at commit {_commit()} with "
        f"`.venv/bin/python -m bench.diagnosis_questions{' --llm' if args.llm else ''}` "
        "(replay of the recorded cases, keyword grader, one run per case).",
        "",
    ]
    for label, results in sections:
        questions = [r for r in results if r.intent != "status"]
        out += [f"**{label}**", "", "```"]
        for split in ("dev", "held-out"):
            part = [r for r in results if r.split == split]
            if part:
                out.append(summary_line(part, runs=1, label=split))
        out.append(summary_line(questions, runs=1, label="questions"))
        out += ["```", "", render_intents(results, label=label), ""]
    if not args.llm:
        out.append("LLM mode: not measured in this run (no model was configured).")
    text = "\n".join(out).rstrip() + "\n"
    print(text)
    if args.no_write:
        return
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(text)
    if DOCS.is_file():
        docs = DOCS.read_text()
        pattern = re.compile(re.escape(MARKERS[0]) + r".*?" + re.escape(MARKERS[1]), re.DOTALL)
        block = f"{MARKERS[0]}\n{text}{MARKERS[1]}"
        if pattern.search(docs):
            DOCS.write_text(pattern.sub(lambda _: block, docs))
    print(f"wrote {RESULT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
