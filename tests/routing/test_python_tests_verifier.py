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
from routing.verifiers.python_tests import extract_code

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
