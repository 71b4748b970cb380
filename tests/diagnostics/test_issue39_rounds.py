"""bench/diagnosis_issue39.py's round table covers every case of eval/issue39/cases, each in exactly one
round, so the regenerated results (bench/results/diagnosis_issue39.md) never leave a case out."""

from __future__ import annotations

import itertools

from bench.diagnosis_issue39 import CASES, KIND, ROUNDS, case_number, round_of


def test_every_case_folder_is_in_exactly_one_round() -> None:
    folders = sorted(p.name for p in (CASES / KIND).iterdir() if p.is_dir())
    assert folders, "no cases found"
    assert [f for f in folders if round_of(f"{KIND}/{f}") is None] == []
    numbers = [case_number(f) for f in folders]
    assert sorted(numbers) == list(range(ROUNDS[0].first, ROUNDS[-1].last + 1))


def test_rounds_are_contiguous_and_name_a_commit() -> None:
    for before, after in itertools.pairwise(ROUNDS):
        assert after.first == before.last + 1
    assert all(len(r.blind) >= 7 and all(c in "0123456789abcdef" for c in r.blind) for r in ROUNDS)


def test_case_number_reads_the_folder_prefix() -> None:
    assert case_number("test_investigate/n07_rollout_progress_deadline_exceeded") == 7
    assert case_number("n52_x") == 52
    assert case_number("readme") == -1
    assert round_of("test_investigate/n999_unknown") is None
