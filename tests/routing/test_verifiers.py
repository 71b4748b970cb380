"""The verifier kinds json_schema, tool_args and regex, and the registry; no database (python_tests:
test_python_tests_verifier.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from routing.verifiers import VerifierConfigError, build_verifier, verifier_kinds

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
