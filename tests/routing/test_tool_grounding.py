"""tool_args with ``content_calls`` and ``check_values``: calls written in text, and values that must come
from the conversation and carry what the request gives."""

from __future__ import annotations

import json
from typing import Any

import pytest

from routing.verifiers import VerifierConfigError, build_verifier
from routing.verifiers.tool_grounding import Evidence, mentions

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather forecast for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "description": "Days ahead, default 3."},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "loan_payment",
            "parameters": {
                "type": "object",
                "properties": {"amount": {"type": "number"}, "rate": {"type": "number"}},
            },
        },
    },
]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def verify(
    user: str, calls: list[dict[str, Any]] | None = None, *, content: str | None = None, **config: Any
):
    request = {
        "messages": [{"role": "system", "content": "Paris Berlin 77"}, {"role": "user", "content": user}],
        "tools": TOOLS,
    }
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls is not None:
        message["tool_calls"] = calls
    config = {"kind": "tool_args", "check_values": True, **config}
    return build_verifier(config).verify(request=request, message=message)


def test_values_from_the_request_pass():
    verdict = verify(
        "What's the weather in Oslo for the next 5 days, in celsius?",
        [call("get_weather", city="Oslo", days=5, unit="celsius")],
    )
    assert verdict.passed, verdict.detail


def test_an_invented_string_fails_naming_it():
    verdict = verify("What's the weather in Oslo?", [call("get_weather", city="Bergen")])
    assert not verdict.passed
    assert "'Bergen' not in the conversation" in verdict.detail


def test_the_system_prompt_does_not_ground_a_value():
    verdict = verify("What's the weather like?", [call("get_weather", city="Paris")])
    assert not verdict.passed and "'Paris'" in verdict.detail


def test_an_invented_number_fails_but_free_and_declared_numbers_pass():
    assert not verify("Weather in Oslo?", [call("get_weather", city="Oslo", days=9)]).passed
    assert verify("Weather in Oslo?", [call("get_weather", city="Oslo", days=3)]).passed  # its default
    assert verify("Weather in Oslo?", [call("get_weather", city="Oslo", days=1)]).passed


@pytest.mark.parametrize(
    ("user", "arguments"),
    [
        ("Payment on $400,000 at 4%?", {"amount": 400000, "rate": 0.04}),  # a percentage as a rate
        ("Payment on $2 million at five percent?", {"amount": 2000000, "rate": 0.05}),
        ("Payment on 1.5k at 12.5 percent?", {"amount": 1500, "rate": 12.5}),
    ],
)
def test_numbers_compare_as_numbers(user, arguments):
    verdict = verify(user, [call("loan_payment", **arguments)])
    assert verdict.passed, verdict.detail


def test_a_date_written_out_grounds_its_iso_form():
    assert Evidence("on January 1, 2022").share_of("2022-01-01") == 1.0


def test_the_request_s_values_must_reach_a_call():
    verdict = verify("Weather in Oslo and in Rome?", [call("get_weather", city="Oslo")])
    assert not verdict.passed and "'Rome'" in verdict.detail
    verdict = verify("Weather in Oslo for 4 days?", [call("get_weather", city="Oslo")])
    assert not verdict.passed and "'4'" in verdict.detail
    both = [call("get_weather", city="Oslo"), call("get_weather", city="Rome")]
    assert verify("Weather in Oslo and in Rome?", both).passed


def test_sentence_starts_list_markers_and_function_words_are_not_mentions():
    text = "Could you help? First, the weather in Oslo.\n1. Then What about it, Also now"
    assert list(mentions(text)) == [("text", "Oslo")]


def test_a_repeated_call_fails():
    twice = [call("get_weather", city="Oslo"), call("get_weather", city="Oslo")]
    verdict = verify("Weather in Oslo?", twice)
    assert not verdict.passed and "repeats tool_calls[0]" in verdict.detail


def test_coverage_applies_only_to_a_direct_answer_of_the_user():
    request = {
        "messages": [
            {"role": "user", "content": "Weather in Oslo and in Rome?"},
            {"role": "assistant", "tool_calls": [{"id": "a", **call("get_weather", city="Rome")}]},
            {"role": "tool", "tool_call_id": "a", "content": "Rome: sunny"},
        ],
        "tools": TOOLS,
    }
    message = {"role": "assistant", "tool_calls": [call("get_weather", city="Oslo")]}
    verdict = build_verifier({"kind": "tool_args", "check_values": True}).verify(
        request=request, message=message
    )
    assert verdict.passed, verdict.detail


def test_calls_written_as_text_are_read_only_when_asked():
    text = '{"name": "get_weather", "arguments": {"city": "Bergen"}}'
    assert verify("Weather in Oslo?", content=text, check_values=False).passed  # no call, none required
    verdict = verify("Weather in Oslo?", content=text, content_calls=True)
    assert not verdict.passed and "'Bergen'" in verdict.detail
    hermes = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    assert verify("Weather in Oslo?", content=hermes, content_calls=True).passed


def test_a_call_written_as_text_is_schema_checked():
    text = '[{"name": "get_weather", "arguments": {"days": 2}}]'
    verdict = verify("Weather for 2 days?", content=text, content_calls=True, check_values=False)
    assert not verdict.passed and '"city" is a required property' in verdict.detail


def test_a_call_cut_short_fails():
    verdict = verify(
        "Weather in Oslo?", content='{"name": "get_weather", "arguments": {"city": "Os', content_calls=True
    )
    assert not verdict.passed and "does not finish it" in verdict.detail
    bad_block = "<tool_call>{oops</tool_call>"
    verdict = verify("Weather in Oslo?", content=bad_block, content_calls=True)
    assert not verdict.passed and "not JSON" in verdict.detail


def test_plain_text_still_passes_when_no_call_is_required():
    assert verify("Tell me a joke", content="Why did the chicken cross the road?", content_calls=True).passed


@pytest.mark.parametrize("name", ["content_calls", "check_values"])
def test_options_must_be_booleans(name):
    with pytest.raises(VerifierConfigError, match=name):
        build_verifier({"kind": "tool_args", name: "yes"})


INTEGRATE = {
    "type": "function",
    "function": {
        "name": "integrate",
        "parameters": {
            "type": "object",
            "properties": {
                "function": {"type": "string"},
                "method": {
                    "type": "string",
                    "description": "Choices are 'trapezoid' or 'simpson'. Default is 'trapezoid'.",
                },
                "style": {"type": "string", "enum": ["nature", "urban"]},
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["exact", "symbolic"]},
                    "description": "Default is empty list.",
                },
                "show_steps": {"type": "boolean", "description": "Whether to show the steps."},
            },
        },
    },
}


def integrate(user: str, **arguments: Any):
    request = {"messages": [{"role": "user", "content": user}], "tools": [INTEGRATE]}
    message = {"role": "assistant", "tool_calls": [call("integrate", **arguments)]}
    verifier = build_verifier({"kind": "tool_args", "check_values": True})
    return verifier.verify(request=request, message=message)


def test_a_choice_the_request_names_must_be_passed():
    verdict = integrate("Integrate x^3 using the simpson method", function="x^3", method="trapezoid")
    assert not verdict.passed and "method (simpson)" in verdict.detail
    verdict = integrate("Integrate x^3 using the simpson method", function="x^3")  # the default is not it
    assert not verdict.passed
    assert integrate("Integrate x^3 using the simpson method", function="x^3", method="simpson").passed


def test_a_named_default_may_be_left_out_and_enums_count_as_choices():
    assert integrate("Integrate x^3 with the trapezoid rule", function="x^3").passed
    verdict = integrate("Integrate x^3, I like nature", function="x^3")
    assert not verdict.passed and "style (nature)" in verdict.detail
    assert integrate("Integrate x^3, I like nature", function="x^3", style="nature").passed


def test_an_array_of_choices_counts_its_item_enum():
    verdict = integrate("Integrate x^3, exact please", function="x^3")
    assert not verdict.passed and "tags (exact)" in verdict.detail
    assert integrate("Integrate x^3, exact please", function="x^3", tags=["exact"]).passed


def test_a_value_copied_from_the_schema_s_names_fails_unless_the_request_says_it():
    verdict = integrate("Integrate x^3", function="function")
    assert not verdict.passed and "'function' not in the conversation" in verdict.detail
    verdict = integrate("Find the area under x^3", function="integrate")
    assert not verdict.passed and "'integrate'" in verdict.detail
    assert integrate("Integrate the function x^3", function="x^3").passed
    assert integrate("Integrate my saved formula called function", function="function").passed


@pytest.mark.parametrize(
    ("user", "flag", "passed"),
    [
        ("Integrate x^3 and show steps", None, False),  # the request names the flag: it must be true
        ("Integrate x^3 and show steps", False, False),
        ("Integrate x^3 and show steps", True, True),
        ("Integrate x^3, I don't need the steps", None, True),  # negated within four words
        ("Integrate x^3 without steps", None, True),
        ("Integrate x^3", None, True),  # not named: the default stands
    ],
)
def test_a_flag_the_request_names_must_be_set(user: str, flag: bool | None, passed: bool):
    arguments: dict[str, Any] = (
        {"function": "x^3"} if flag is None else {"function": "x^3", "show_steps": flag}
    )
    verdict = integrate(user, **arguments)
    assert verdict.passed is passed, verdict.detail
    if not passed:
        assert "show_steps" in verdict.detail
