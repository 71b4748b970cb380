"""Diagnosis questions: pass rate per intent and split, and "no data" honesty, on the replay cases.

Runs ``diagnose_replay``'s evaluation (keyword grader) over ``eval/holmesgpt/cases`` and
``eval/handwritten/cases``, analyzers-only; with ``--llm`` (and an agent key configured,
SKILLGATE_AGENT_API_KEY) also in LLM mode through the gateway on the same cases; with ``--scripted``
also the tool-calling Observer against scripted models (bench/diagnosis_scripted.py) served by the
local OpenAI-protocol stub (called directly, no gateway: it measures the loop, the evidence check and
the floor, not a model). LLM sections are shown next to analyzers-only per intent. Prints the table,
writes it to ``bench/results/diagnosis_questions.md`` and puts it into ``docs/guides/diagnosis.md``
between the ``bench:diagnosis_questions`` markers, so the docs never carry numbers copied by hand.

Issue 39's blind question rounds (``eval/issue39/questions``, all held-out: round one in ``test_ask_blind``,
round two in ``test_ask_blind2``) are measured apart, analyzers-only, one section per round with the commit
that added its cases: they are never mixed into the older cases' numbers.

    .venv/bin/python -m bench.diagnosis_questions                              # analyzers-only
    .venv/bin/python -m bench.diagnosis_questions --skip-blind                 # no blind reruns of issue 39
    .venv/bin/python -m bench.diagnosis_questions --scripted quoter,liar,chaos  # + scripted tool calls
    .venv/bin/python -m bench.diagnosis_questions --llm                        # + LLM mode (gateway)
"""

from __future__ import annotations

import argparse
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from bench.diagnosis_issue39 import Blind, blind_replay
from bench.diagnosis_scripted import POLICIES
from bench.support.openai_stub import OpenAIStub
from core.conf import forget
from diagnostics import conf
from diagnostics.agent.investigation.llm import GatewayClient
from diagnostics.agent.runner import MODE_LLM, build_observer_for
from diagnostics.evaluation.replay import evaluate, render_comparison, render_intents, summary_line

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "bench/results/diagnosis_questions.md"
DOCS = ROOT / "docs/guides/diagnosis.md"
QUESTIONS_REL = "eval/issue39/questions"
BLIND_ROUND = ROOT / QUESTIONS_REL
ROUND_RESULT = ROOT / "bench/results/diagnosis_questions_issue39.md"
# Issue 39's question rounds: (name, case folder under BLIND_ROUND, the commit that added the cases before any
# code change for them).
QUESTION_ROUNDS = (
    ("one (39b)", "test_ask_blind", "5c24afb"),
    ("two (39c)", "test_ask_blind2", "f84c28c"),
    ("three (39d)", "test_ask_blind3", "ccc3382"),
)
MARKERS = ("<!-- bench:diagnosis_questions -->", "<!-- /bench:diagnosis_questions -->")


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", action="store_true", help="also run LLM mode (needs an agent key)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--skip-blind", action="store_true", help="no worktrees: issue 39's question rounds at this tree only"
    )
    parser.add_argument(
        "--scripted",
        default="",
        help="comma-separated scripted models for the tool-calling Observer: "
        "quoter, liar, chaos (bench/diagnosis_scripted.py)",
    )
    args = parser.parse_args()
    roots = [ROOT / "eval/holmesgpt/cases", ROOT / "eval/handwritten/cases"]
    analyzers = evaluate(roots, mode="analyzers", grader="keyword")
    blind_round = evaluate([BLIND_ROUND], mode="analyzers", grader="keyword")
    llm_sections = []
    if args.llm:
        if not conf.get().agent.llm_configured:
            raise SystemExit(f"--llm: no agent key ({conf.AGENT_KEY_ENV}) is configured.")
        observer = "tool-calling" if conf.get().agent.observer_tool_calling else "JSON-protocol"
        llm_sections.append((f"LLM ({observer} Observer)", evaluate(roots, mode="llm", grader="keyword")))
    for name in [n.strip() for n in args.scripted.split(",") if n.strip()]:
        llm_sections.append((f"scripted {name}", _scripted(name, roots)))
    flags = (" --llm" if args.llm else "") + (f" --scripted {args.scripted}" if args.scripted else "")
    flags += " --skip-blind" if args.skip_blind else ""
    out = [
        f"Measured {datetime.now(tz=UTC):%Y-%m-%d} at commit {_commit()} with "
        f"`.venv/bin/python -m bench.diagnosis_questions{flags}` "
        "(replay of the recorded cases, keyword grader, one run per case).",
        "",
    ]
    for label, results in [("analyzers-only", analyzers), *llm_sections]:
        questions = [r for r in results if r.intent != "status"]
        out += [f"**{label}**", "", "```"]
        for split in ("dev", "held-out"):
            part = [r for r in results if r.split == split]
            if part:
                out.append(summary_line(part, runs=1, label=split))
        out.append(summary_line(questions, runs=1, label="questions"))
        out += ["```", ""]
        if label == "analyzers-only":
            out += [render_intents(results, label=label), ""]
        else:
            out += [render_comparison(analyzers, results, label=label), ""]
    round_lines = [
        f"**issue 39's question rounds** (`{BLIND_ROUND.relative_to(ROOT)}`, analyzers-only, apart from "
        "the older cases, one section per round)",
        "",
    ]
    for name, folder, blind in QUESTION_ROUNDS:
        mine = [r for r in blind_round if r.case.startswith(f"{folder}/")]
        before = None if args.skip_blind else blind_replay(blind, f"{QUESTIONS_REL}/{folder}", folder, _all)
        round_lines += [
            f"Round {name}: `{folder}`, {len(mine)} cases, added at {blind} before any code change for them. "
            f"Blind (the code of {blind}, replayed in a temporary worktree): {_blind_score(before)}.",
            "",
            "```",
            summary_line(mine, runs=1, label="held-out (now)"),
            "```",
            "",
            render_intents(mine, label="analyzers-only"),
            "",
            "Not passed: " + (", ".join(r.case for r in mine if not r.passed) or "none") + ".",
            "",
        ]
    folders = tuple(f"{folder}/" for _, folder, _ in QUESTION_ROUNDS)
    unplaced = [r.case for r in blind_round if not r.case.startswith(folders)]
    if unplaced:
        raise SystemExit(f"question cases in no round (add them to QUESTION_ROUNDS): {', '.join(unplaced)}")
    out += round_lines
    if not args.llm:
        out.append(
            "LLM mode with a real model: not measured in this run (no model capable of native tool calls "
            "was configured)."
        )
    text = "\n".join(out).rstrip() + "\n"
    print(text)
    if args.no_write:
        return
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(text)
    ROUND_RESULT.write_text(f"{out[0]}\n\n" + "\n".join(round_lines).rstrip() + "\n")
    if DOCS.is_file():
        docs = DOCS.read_text()
        pattern = re.compile(re.escape(MARKERS[0]) + r".*?" + re.escape(MARKERS[1]), re.DOTALL)
        block = f"{MARKERS[0]}\n{text}{MARKERS[1]}"
        if pattern.search(docs):
            DOCS.write_text(pattern.sub(lambda _: block, docs))
    print(f"wrote {RESULT.relative_to(ROOT)}")


def _all(_: str) -> bool:
    return True


def _blind_score(blind: Blind | None) -> str:
    if blind is None:
        return "not run (--skip-blind)"
    return f"could not run ({blind.failure})" if blind.failure else f"**{blind.passed}/{blind.total}**"


def _scripted(name: str, roots: list[Path]) -> list[Any]:
    """The evaluation with the tool-calling Observer talking to scripted model ``name``."""
    if name not in POLICIES:
        raise SystemExit(f"--scripted: {name!r} is not one of {', '.join(POLICIES)}.")
    settings.DIAGNOSTICS_OBSERVER_TOOL_CALLING = True  # the scripted models speak native tool calls
    forget()  # the typed settings were built (and cached) by the analyzers-only run before this
    with OpenAIStub(responder=POLICIES[name]) as stub:
        client = GatewayClient(
            base_url=stub.base_url,
            api_key="scripted",
            profile=conf.get().agent.observer_profile,
            timeout_s=30,
        )
        return evaluate(
            roots,
            mode=MODE_LLM,
            grader="keyword",
            observer_factory=lambda: build_observer_for(MODE_LLM, client),
        )


if __name__ == "__main__":
    main()
