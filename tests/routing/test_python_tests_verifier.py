"""The python_tests verifier: real HumanEval/MBPP tasks run in the sandbox, early exits, bad configs and
the code extraction from an answer. No database."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from routing.verifiers import VerifierConfigError, build_verifier
from routing.verifiers.base import Verdict
from routing.verifiers.python_tests import extract_code
from routing.verifiers.sandbox import SandboxResult

EVAL_SET = Path(settings.EVAL_DIR) / "he_mbpp.jsonl"


def answer(content: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **extra}


@pytest.fixture(scope="module")
def tasks() -> dict[str, dict[str, Any]]:
    with EVAL_SET.open() as fh:  # the repository carries it (eval/README.md): never skipped
        rows = [json.loads(line) for line in fh if line.strip()]
    return {row["task_id"]: row for row in rows}


def task_verifier(task: dict[str, Any], **overrides: Any):
    config = {
        "kind": "python_tests",
        "test": task["test"],
        "entry_point": task["entry_point"],
        "prompt": task["prompt"],
        **overrides,
    }
    return build_verifier(config)


def wrong_body(task: dict[str, Any]) -> str:
    return "    return None\n"


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/12", "HumanEval/35"])
def test_humaneval_canonical_completion_passes_and_wrong_one_fails(tasks, task_id):
    task = tasks[task_id]
    verifier = task_verifier(task)
    good = verifier.verify(request={}, message=answer(task["canonical_solution"]))
    assert good.passed, good.detail
    bad = verifier.verify(request={}, message=answer(wrong_body(task)))
    assert not bad.passed
    assert "AssertionError" in bad.detail
    assert "assert" in bad.detail  # the failing assert line from the task's tests


def test_humaneval_full_function_in_a_fence_passes(tasks):
    task = tasks["HumanEval/2"]
    full = task["prompt"] + task["canonical_solution"]
    reply = f"Here is my solution:\n\n```python\n{full}```\n\nIt truncates the number."
    verdict = task_verifier(task).verify(request={}, message=answer(reply))
    assert verdict.passed, verdict.detail


def test_humaneval_answer_defining_only_the_function_keeps_prompt_helpers(tasks):
    # HumanEval/10's prompt defines the is_palindrome helper; chat answers often omit it.
    task = tasks["HumanEval/10"]
    body = task["canonical_solution"]
    reply = f"```python\ndef make_palindrome(string: str) -> str:\n{body}```"
    verdict = task_verifier(task).verify(request={}, message=answer(reply))
    assert verdict.passed, verdict.detail


MBPP_SOLUTIONS = {
    "mbpp/604": "def reverse_words(s):\n    return ' '.join(reversed(s.split()))\n",
    "mbpp/612": "def merge(lst):\n    return [list(group) for group in zip(*lst)]\n",
    "mbpp/605": (
        "def prime_num(n):\n    if n < 2:\n        return False\n"
        "    return all(n % d for d in range(2, int(n ** 0.5) + 1))\n"
    ),
}


@pytest.mark.parametrize("task_id", sorted(MBPP_SOLUTIONS))
def test_mbpp_correct_solution_passes_and_wrong_one_fails(tasks, task_id):
    task = tasks[task_id]
    verifier = task_verifier(task)
    good = verifier.verify(request={}, message=answer(f"```python\n{MBPP_SOLUTIONS[task_id]}```"))
    assert good.passed, good.detail
    wrong = f"```python\ndef {task['entry_point']}(*args):\n    return None\n```"
    bad = verifier.verify(request={}, message=answer(wrong))
    assert not bad.passed and "AssertionError" in bad.detail


def test_plain_assert_tests_without_check():
    verifier = build_verifier(
        {"kind": "python_tests", "test": "assert add(2, 3) == 5\nassert add(-1, 1) == 0"}
    )
    assert verifier.verify(request={}, message=answer("def add(a, b):\n    return a + b")).passed
    bad = verifier.verify(request={}, message=answer("def add(a, b):\n    return a - b"))
    assert not bad.passed and "assert add(2, 3) == 5" in bad.detail


def test_python_syntax_error_fails():
    verifier = build_verifier({"kind": "python_tests", "test": "assert f() == 1"})
    verdict = verifier.verify(request={}, message=answer("def f(:\n    return 1"))
    assert not verdict.passed and "SyntaxError" in verdict.detail


def test_python_timeout_is_reported():
    verifier = build_verifier({"kind": "python_tests", "test": "assert spin() == 1", "timeout_s": 1})
    verdict = verifier.verify(request={}, message=answer("def spin():\n    while True:\n        pass"))
    assert not verdict.passed and verdict.detail == "timeout after 1s"


def test_python_early_exit_cannot_skip_the_tests():
    verifier = build_verifier({"kind": "python_tests", "test": "assert f() == 2"})
    verdict = verifier.verify(request={}, message=answer("import sys\ndef f():\n    return 1\nsys.exit(0)"))
    assert not verdict.passed and "exited before the tests" in verdict.detail


def test_python_answer_main_block_does_not_run():
    code = "def f():\n    return 2\n\nif __name__ == '__main__':\n    f(int(input()))\n"
    verifier = build_verifier({"kind": "python_tests", "test": "assert f() == 2"})
    verdict = verifier.verify(request={}, message=answer(code))
    assert verdict.passed, verdict.detail


def test_python_answer_cannot_open_the_network():
    verifier = build_verifier({"kind": "python_tests", "test": "assert fetch() == 'ok'"})
    code = (
        "import urllib.request\ndef fetch():\n    return urllib.request.urlopen('http://127.0.0.1:9/').read()"
    )
    verdict = verifier.verify(request={}, message=answer(code))
    # The sandbox has a network namespace of its own: nothing listens there, nothing leaves it.
    assert not verdict.passed and "Connection refused" in verdict.detail


def test_extract_code_prefers_the_python_block():
    text = "Run:\n```bash\npip install x\n```\nThen:\n```python\nprint(1)\n```\n```\nprint(2)\n```"
    assert extract_code(text) == "print(1)\n"
    assert extract_code("```\nprint(2)\n```") == "print(2)\n"
    assert extract_code("print(3)") == "print(3)"


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({}, "python_tests.test"),
        ({"test": "   "}, "python_tests.test"),
        ({"test": "def check(candidate):\n    assert candidate(1)"}, "python_tests.entry_point"),
        ({"test": "assert True", "entry_point": "not an identifier"}, "python_tests.entry_point"),
        ({"test": "assert True", "timeout_s": 0}, "python_tests.timeout_s"),
        ({"test": "assert True", "timeout_s": "10"}, "python_tests.timeout_s"),
        ({"test": "assert True", "memory_mb": 1}, "python_tests.memory_mb"),
        ({"test": "assert True", "prompt": 42}, "python_tests.prompt"),
    ],
)
def test_python_bad_config_is_rejected(config, field):
    with pytest.raises(VerifierConfigError, match=re.escape(field)):
        build_verifier({"kind": "python_tests", **config})


def test_extract_code_takes_the_code_around_a_lone_fence():
    closed_only = "def f():\n    return 1\n```\n\nThis function returns one.\n"
    assert extract_code(closed_only) == "def f():\n    return 1\n"
    cut = "Here it is:\n```python\ndef f():\n    return 1"
    assert extract_code(cut) == "def f():\n    return 1"
    assert extract_code("```\nprint(4)") == "print(4)"


# --- two processes: what crosses, and who counts ---------------------------------------------------

CROSSING_ANSWER = """\
import math
class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b
    def span(self):
        return self.b - self.a
def longest(pairs):
    return max(p.span() for p in pairs)
def squares(n):
    return (i * i for i in range(n))
def sort_in_place(xs):
    xs.sort()
def parse(text):
    if not text:
        raise ValueError("empty")
    return int(text)
def lookup(d, k):
    return d[k]
def area(r):
    return math.pi * r * r
LIMIT = 10
"""

CROSSING_TEST = """\
p = Pair(1, 5)
assert p.a == 1 and p.span() == 4
p.b = 9
assert p.span() == 8 and longest([Pair(0, 2), p]) == 8
assert list(squares(4)) == [0, 1, 4, 9]
xs = [3, 1, 2]
sort_in_place(xs)
assert xs == [1, 2, 3]
try:
    parse("")
except ValueError as exc:
    assert "empty" in str(exc)
else:
    raise AssertionError("no ValueError")
try:
    lookup({}, "k")
except KeyError as exc:
    assert exc.args == ("k",)
assert math.isclose(area(1.0), math.pi) and area(float("inf")) == float("inf")
assert LIMIT == 10 and isinstance(parse("7"), int)
"""


def test_objects_iterators_mutations_exceptions_and_modules_cross_as_the_tests_expect():
    verifier = build_verifier({"kind": "python_tests", "test": CROSSING_TEST})
    verdict = verifier.verify(request={}, message=answer(CROSSING_ANSWER))
    assert verdict == Verdict(True, "all 12 tests passed")
    wrong = CROSSING_ANSWER.replace("xs.sort()", "xs.sort(reverse=True)")
    verdict = verifier.verify(request={}, message=answer(wrong))
    assert not verdict.passed and "assert xs == [1, 2, 3]" in verdict.detail


def test_a_handle_compares_by_identity_only():
    verifier = build_verifier({"kind": "python_tests", "test": "assert add(2, 3) == 5"})
    forged = "class X:\n    __eq__ = lambda *a: True\ndef add(a, b):\n    return X()\n"
    verdict = verifier.verify(request={}, message=answer(forged))
    assert not verdict.passed and "AssertionError" in verdict.detail


def test_the_gateway_counts_the_tests_and_a_short_report_fails():
    # The tests' own process leaves after two of its four statements, exit status 0.
    test = "import os\nassert add(2, 3) == 5\nos._exit(0)\nassert add(1, 1) == 2\n"
    verdict = build_verifier({"kind": "python_tests", "test": test}).verify(
        request={}, message=answer("def add(a, b):\n    return a + b")
    )
    assert verdict == Verdict(False, "the tests reported 2 results; 4 tests were expected")


GOOD_RUN = SandboxResult(True, 0, "", "", False)
ALIVE = SandboxResult(False, None, "", "", False)
OK = ['{"test": 0, "ok": true}', '{"test": 1, "ok": true}']


@pytest.mark.parametrize(
    ("answer_side", "tests_side", "lines", "detail"),
    [
        (ALIVE, GOOD_RUN, OK[:1], "the tests reported 1 results; 2 tests were expected"),
        (ALIVE, GOOD_RUN, [*OK, OK[1]], "the tests reported 3 results; 2 tests were expected"),
        (ALIVE, GOOD_RUN, [OK[1], OK[0]], "the tests reported 2 results; 2 tests were expected"),
        (ALIVE, GOOD_RUN, [OK[0], '{"test": 1, "ok": 1}'], "a test failed"),
        (ALIVE, GOOD_RUN, [OK[0], "garbage"], "an unreadable report line: 'garbage'"),
        (ALIVE, SandboxResult(False, 1, "", "boom", False), OK, "boom"),
        (SandboxResult(True, 0, "", "", False), GOOD_RUN, OK, "the answer's process ended (exit status 0)"),
        (ALIVE, SandboxResult(False, None, "", "", True), OK, "timeout after 10s"),
    ],
    ids=[
        "short",
        "repeated",
        "out-of-order",
        "not-true",
        "junk",
        "tests-crashed",
        "answer-ended",
        "deadline",
    ],
)
def test_the_verdict_is_a_pass_only_when_everything_observed_agrees(answer_side, tests_side, lines, detail):
    verifier = build_verifier({"kind": "python_tests", "test": "assert True\nassert True"})
    assert verifier.judge(ALIVE, GOOD_RUN, OK, 2) == Verdict(True, "all 2 tests passed")
    verdict = verifier.judge(answer_side, tests_side, lines, 2)
    assert not verdict.passed and detail in verdict.detail


def test_unsafe_mode_runs_both_processes_unsandboxed(settings):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "SANDBOX_BWRAP": "/nonexistent/bwrap",
        "SANDBOX_ALLOW_UNSAFE": True,
    }
    verifier = build_verifier({"kind": "python_tests", "test": "assert add(2, 3) == 5"})
    assert verifier.verify(request={}, message=answer("def add(a, b):\n    return a + b")).passed
    assert not verifier.verify(request={}, message=answer("def add(a, b):\n    return a - b")).passed


def test_a_stop_iteration_from_the_answer_does_not_end_a_loop_of_the_tests():
    test = "for y in map(f, [1, 2]):\n    assert y == 2\n"
    verifier = build_verifier({"kind": "python_tests", "test": test})
    verdict = verifier.verify(request={}, message=answer("def f(x):\n    raise StopIteration"))
    assert not verdict.passed and "StopIteration" in verdict.detail
    assert verifier.verify(request={}, message=answer("def f(x):\n    return 2")).passed


def test_a_test_that_does_not_parse_judges_nothing():
    verdict = build_verifier({"kind": "python_tests", "test": "assert (add(2, 3) == 5"}).verify(
        request={}, message=answer("def add(a, b):\n    return a + b")
    )
    assert verdict.error and not verdict.passed
    assert verdict.detail.startswith("python_tests.test does not parse: SyntaxError")


@pytest.mark.parametrize(
    "nothing_ran",
    [
        SandboxResult(False, None, "", "sandbox unavailable: no bwrap", False, unavailable=True),
        SandboxResult(False, None, "", "sandbox error: OSError: [Errno 11] fork", False, broken=True),
    ],
    ids=["unavailable", "broken"],
)
def test_a_run_that_never_happened_is_an_error_not_a_verdict(nothing_ran):
    # Unknown is not pass, nor the answer's failure: a fail would label every student answer wrong.
    verifier = build_verifier({"kind": "python_tests", "test": "assert True\nassert True"})
    for sides in ((nothing_ran, nothing_ran), (ALIVE, nothing_ran), (nothing_ran, GOOD_RUN)):
        verdict = verifier.judge(*sides, OK, 2)
        assert (verdict.passed, verdict.error, verdict.detail) == (False, True, nothing_ran.stderr)
