"""The four verifier kinds. No database; python_tests runs real HumanEval/MBPP tasks in the sandbox."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from routing.verifiers import VerifierConfigError, build_verifier, verifier_kinds
from routing.verifiers.python_tests import extract_code

EVAL_SET = Path(settings.EVAL_DIR) / "he_mbpp.jsonl"


def answer(content: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **extra}


# --- registry ---------------------------------------------------------------------------------------


def test_all_four_kinds_are_registered():
    assert set(verifier_kinds()) >= {"json_schema", "tool_args", "regex", "python_tests"}


@pytest.mark.parametrize("config", [{"kind": "telepathy"}, {}, {"kind": None}])
def test_build_verifier_rejects_unknown_kind(config):
    with pytest.raises(VerifierConfigError, match=re.escape("verifier.kind")):
        build_verifier(config)


# --- json_schema ------------------------------------------------------------------------------------

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "pets": {"type": "array", "items": {"type": "object", "required": ["species"]}},
    },
    "required": ["name", "age"],
}


def check_json(content: Any, *, schema: Any = None, request: dict[str, Any] | None = None):
    config: dict[str, Any] = {"kind": "json_schema"}
    if schema is not None:
        config["schema"] = schema
    return build_verifier(config).verify(request=request or {}, message=answer(content))


def test_json_valid_against_config_schema_passes():
    verdict = check_json('{"name": "Ada", "age": 36}', schema=PERSON)
    assert verdict.passed, verdict.detail


def test_json_missing_required_field_fails_naming_it():
    verdict = check_json('{"name": "Ada"}', schema=PERSON)
    assert not verdict.passed
    assert '"age" is a required property' in verdict.detail
    assert "$" in verdict.detail


def test_json_nested_failure_names_the_path():
    verdict = check_json(
        '{"name": "Ada", "age": 36, "pets": [{"species": "cat"}, {"name": "Rex"}]}', schema=PERSON
    )
    assert not verdict.passed
    assert "$.pets[1]" in verdict.detail and "species" in verdict.detail


def test_json_wrong_type_fails():
    verdict = check_json('{"name": "Ada", "age": "thirty-six"}', schema=PERSON)
    assert not verdict.passed
    assert "$.age" in verdict.detail and "integer" in verdict.detail


@pytest.mark.parametrize(
    "content", ["Sure! Here is the JSON: {name: Ada}", "", None, '{"name": "Ada", "age": NaN}']
)
def test_json_non_json_fails(content):
    verdict = check_json(content, schema=PERSON)
    assert not verdict.passed
    assert verdict.detail.startswith("not valid JSON")


@pytest.mark.parametrize("fence", ["```json\n{}\n```", "```\n{}\n```", "\n```JSON\n{}```\n"])
def test_json_in_one_fenced_block_is_accepted(fence):
    verdict = check_json(fence.replace("{}", '{"name": "Ada", "age": 36}'), schema=PERSON)
    assert verdict.passed, verdict.detail


def test_json_fence_with_prose_around_it_is_not_accepted():
    verdict = check_json('Here you go:\n```json\n{"name": "Ada", "age": 36}\n```', schema=PERSON)
    assert not verdict.passed


def test_json_content_parts_are_joined():
    parts = [{"type": "text", "text": '{"name": "Ada", '}, {"type": "text", "text": '"age": 36}'}]
    assert check_json(parts, schema=PERSON).passed


def test_json_uses_response_format_schema_when_config_has_none():
    request = {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON, "strict": True},
        }
    }
    assert check_json('{"name": "Ada", "age": 36}', request=request).passed
    verdict = check_json('{"age": 36}', request=request)
    assert not verdict.passed and '"name" is a required property' in verdict.detail


def test_config_schema_wins_over_response_format():
    request = {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "array"}}}}
    assert check_json('{"name": "Ada", "age": 36}', schema=PERSON, request=request).passed


def test_json_object_response_format_requires_an_object():
    request = {"response_format": {"type": "json_object"}}
    assert check_json('{"anything": [1, 2]}', request=request).passed
    verdict = check_json("[1, 2]", request=request)
    assert not verdict.passed and "object" in verdict.detail


def test_json_without_any_schema_fails_with_an_explanation():
    verdict = check_json('{"a": 1}', request={"response_format": {"type": "text"}})
    assert not verdict.passed and "no schema" in verdict.detail


def test_json_invalid_response_format_schema_fails_the_verdict():
    request = {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}}
    verdict = check_json("{}", request=request)
    assert not verdict.passed and "response_format" in verdict.detail


@pytest.mark.parametrize("schema", [{"type": "nonsense"}, {"required": "name"}, "not a schema"])
def test_json_invalid_config_schema_is_a_config_error(schema):
    with pytest.raises(VerifierConfigError, match=re.escape("json_schema.schema")):
        build_verifier({"kind": "json_schema", "schema": schema})


# --- tool_args --------------------------------------------------------------------------------------

WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    },
]


def tool_call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def check_tools(calls: list[dict[str, Any]] | None, *, tool_choice: Any = "auto", **config: Any):
    request = {"model": "m", "messages": [], "tools": WEATHER_TOOLS, "tool_choice": tool_choice}
    message = answer(None, tool_calls=calls) if calls is not None else answer("I cannot call tools.")
    return build_verifier({"kind": "tool_args", **config}).verify(request=request, message=message)


def test_tool_valid_call_passes():
    verdict = check_tools([tool_call("get_weather", '{"city": "Oslo", "days": 3}')])
    assert verdict.passed, verdict.detail


def test_tool_several_valid_calls_pass():
    assert check_tools(
        [tool_call("get_weather", '{"city": "Oslo"}'), tool_call("get_time", "{}", "c2")]
    ).passed


def test_tool_unknown_function_fails_naming_it():
    verdict = check_tools([tool_call("launch_rockets", "{}")])
    assert not verdict.passed
    assert "unknown function 'launch_rockets'" in verdict.detail and "get_weather" in verdict.detail


def test_tool_wrong_argument_type_fails():
    verdict = check_tools([tool_call("get_weather", '{"city": "Oslo", "days": "three"}')])
    assert not verdict.passed
    assert "$.days" in verdict.detail and "integer" in verdict.detail


def test_tool_missing_required_argument_fails():
    verdict = check_tools([tool_call("get_weather", '{"days": 2}')])
    assert not verdict.passed and '"city" is a required property' in verdict.detail


def test_tool_extra_argument_fails_when_schema_forbids_it():
    verdict = check_tools([tool_call("get_weather", '{"city": "Oslo", "units": "metric"}')])
    assert not verdict.passed and "units" in verdict.detail


@pytest.mark.parametrize("arguments", ['{"city": "Oslo"', "city=Oslo", ""])
def test_tool_invalid_json_arguments_fail(arguments):
    verdict = check_tools([tool_call("get_weather", arguments)])
    assert not verdict.passed and "not valid JSON" in verdict.detail


@pytest.mark.parametrize("arguments", ['["Oslo"]', '"Oslo"', {"city": "Oslo"}])
def test_tool_arguments_must_be_a_json_object_string(arguments):
    verdict = check_tools([tool_call("get_weather", arguments)])
    assert not verdict.passed and "arguments must be a JSON" in verdict.detail


def test_tool_failure_names_the_failing_call_index():
    verdict = check_tools(
        [tool_call("get_weather", '{"city": "Oslo"}'), tool_call("get_weather", "{}", "c2")]
    )
    assert not verdict.passed and verdict.detail.startswith("tool_calls[1]")


def test_tool_required_but_missing_fails():
    verdict = check_tools(None, tool_choice="required")
    assert not verdict.passed and "requires" in verdict.detail


def test_tool_named_choice_requires_that_function():
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert not check_tools(None, tool_choice=named).passed
    assert check_tools([tool_call("get_weather", '{"city": "Oslo"}')], tool_choice=named).passed
    verdict = check_tools([tool_call("get_time", "{}")], tool_choice=named)
    assert not verdict.passed and "forces 'get_weather'" in verdict.detail


def test_tool_call_optional_under_auto_unless_config_requires_it():
    assert check_tools(None, tool_choice="auto").passed
    assert not check_tools(None, tool_choice="auto", require_tool_call=True).passed
    assert check_tools(None, tool_choice="required", require_tool_call=False).passed


def test_tool_calls_despite_tool_choice_none_fail():
    assert not check_tools([tool_call("get_time", "{}")], tool_choice="none").passed


def test_tool_require_tool_call_must_be_boolean():
    with pytest.raises(VerifierConfigError, match="require_tool_call"):
        build_verifier({"kind": "tool_args", "require_tool_call": "yes"})


# --- regex ------------------------------------------------------------------------------------------


def check_regex(content: str, **config: Any):
    return build_verifier({"kind": "regex", **config}).verify(request={}, message=answer(content))


def test_regex_search_finds_the_pattern_anywhere():
    verdict = check_regex("The answer is 42.\n", pattern=r"answer is (\d+)")
    assert verdict.passed and "42" in verdict.detail
    assert not check_regex("No idea.", pattern=r"answer is (\d+)").passed


def test_regex_fullmatch_needs_the_whole_answer():
    assert check_regex("  42\n", pattern=r"\d+", mode="fullmatch").passed
    verdict = check_regex("The answer is 42", pattern=r"\d+", mode="fullmatch")
    assert not verdict.passed and "fullmatch" in verdict.detail


def test_regex_flags_are_applied():
    assert not check_regex("ANSWER: yes", pattern=r"answer: (yes|no)").passed
    assert check_regex("ANSWER: yes", pattern=r"answer: (yes|no)", flags=["IGNORECASE"]).passed
    assert check_regex("a\nb", pattern=r"^b$", flags=["MULTILINE"]).passed
    assert not check_regex("a\nb", pattern=r"^b$").passed
    assert check_regex("a\nb", pattern=r"a.b", mode="fullmatch", flags=["dotall"]).passed


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"pattern": "(unclosed"}, "regex.pattern"),
        ({"pattern": "[a-"}, "regex.pattern"),
        ({}, "regex.pattern"),
        ({"pattern": "x", "mode": "match"}, "regex.mode"),
        ({"pattern": "x", "flags": ["SHOUTING"]}, "regex.flags"),
        ({"pattern": "x", "flags": "IGNORECASE"}, "regex.flags"),
    ],
)
def test_regex_bad_config_is_rejected(config, field):
    with pytest.raises(VerifierConfigError, match=re.escape(field)):
        build_verifier({"kind": "regex", **config})


# --- python_tests -----------------------------------------------------------------------------------


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


def test_only_bounded_cheap_checks_skip_the_thread_pool():
    from routing.verifiers import build_verifier

    def msg(text: str) -> dict:
        return {"role": "assistant", "content": text}

    regex = build_verifier({"kind": "regex", "pattern": "ok"})
    assert regex.runs_inline(request={}, message=msg("ok"))
    assert not regex.runs_inline(request={}, message=msg("x" * 100_000))  # a long answer: the pool
    plain = build_verifier({"kind": "json_schema", "schema": {"type": "object"}})
    assert plain.runs_inline(request={}, message=msg("{}"))
    backtracking = build_verifier({"kind": "json_schema", "schema": {"type": "string", "pattern": "^(a+)+$"}})
    assert not backtracking.runs_inline(request={}, message=msg('"aaa"'))  # Python re: the pool
    tools = build_verifier({"kind": "tool_args"})
    request = {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}
    call = {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}]}
    assert tools.runs_inline(request=request, message=call)
    request["tools"][0]["function"]["parameters"] = {"type": "object", "patternProperties": {"^a": {}}}
    assert not tools.runs_inline(request=request, message=call)
    code = build_verifier({"kind": "python_tests", "test": "assert True"})
    assert not code.runs_inline(request={}, message=msg("x = 1"))


def test_extract_code_takes_the_code_around_a_lone_fence():
    closed_only = "def f():\n    return 1\n```\n\nThis function returns one.\n"
    assert extract_code(closed_only) == "def f():\n    return 1\n"
    cut = "Here it is:\n```python\ndef f():\n    return 1"
    assert extract_code(cut) == "def f():\n    return 1"
    assert extract_code("```\nprint(4)") == "print(4)"
