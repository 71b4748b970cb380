"""Diagnosis that generalizes: cases split by a fixed hash of their name into development and held-out
ones, evaluated per split; every development case passes on the analyzers alone."""

from __future__ import annotations

import io
from pathlib import Path

from django.conf import settings
from django.core.management import call_command

from diagnostics.evaluation.cases import DEV, HELD_OUT, discover_cases, split_of
from diagnostics.evaluation.replay import evaluate

EVAL = Path(settings.EVAL_DIR)
HOLMES = EVAL / "holmesgpt" / "cases"
HANDWRITTEN = EVAL / "handwritten" / "cases"
# Development cases whose answer is not in their recordings (the original ran against a live
# cluster): the NetworkPolicy and the HPA were never recorded, so no agent can see them in replay.
NOT_IN_RECORDINGS = {
    "test_ask_holmes/42_dns_issues_result_new_tools",
    "test_ask_holmes/64_keda_vs_hpa_confusion",
}


def test_the_split_is_a_fixed_hash_of_the_name_and_holds_out_about_a_third():
    names = [f"suite/{i:03d}_case" for i in range(300)]
    splits = [split_of(n) for n in names]
    assert splits == [split_of(n) for n in names]
    assert set(splits) == {DEV, HELD_OUT}
    assert 0.25 < splits.count(HELD_OUT) / len(names) < 0.42
    for case in discover_cases(HOLMES):
        assert case.split == split_of(case.name)


def test_evaluate_runs_one_split_when_asked_and_reports_both():
    held = evaluate([HOLMES, HANDWRITTEN], only=HELD_OUT)
    assert held and {r.split for r in held} == {HELD_OUT}
    out = io.StringIO()
    call_command(
        "diagnose_replay",
        "--cases",
        str(HOLMES),
        "--cases",
        str(HANDWRITTEN),
        "--case",
        "hw0",
        "--no-llm",
        stdout=out,
        stderr=io.StringIO(),
    )
    text = out.getvalue()
    lines = [line for line in text.splitlines() if "pass rate" in line]
    assert [line.split()[0] for line in lines] == ["dev", "held-out", "all"], text
    assert all("best@1" in line and "avg@1" in line for line in lines)


def test_every_development_case_passes_analyzers_only():
    results = evaluate([HOLMES, HANDWRITTEN], only=DEV)
    failed = {r.case for r in results if not r.passed}
    assert failed <= NOT_IN_RECORDINGS, failed
    assert sum(r.passed for r in results) >= len(results) - len(NOT_IN_RECORDINGS)


def test_the_hand_written_cases_say_so():
    cases = discover_cases(HANDWRITTEN)
    assert len(cases) >= 10
    for case in cases:
        assert "hand-written" in (case.path / "test_case.yaml").read_text()
