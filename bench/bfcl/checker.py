"""BFCL's matching rules (its AST checker, Python language) against the possible answers.

A port of ``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` (bfcl-eval 2026.3.23, Apache-2.0) for the
categories used here, so nothing imports the package (and its many dependencies) at run time:

* simple: exactly one call, of the expected function, with every required parameter, no parameter the
  docs or the possible answer do not have, every value of the documented type (an int passes for a
  float) and among the allowed values; strings compared after BFCL's standardization (case, spaces
  and ``,./-_*^`` ignored); an allowed list containing ``""`` means the parameter may be omitted;
* multiple: one call, checked as simple against the expected function;
* parallel and parallel_multiple: as many calls as expected, matched in any order;
* irrelevance: correct when the answer calls no function.

tests/training/test_bfcl_checker.py runs this port and BFCL's own checker side by side on BFCL's data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, cast

Call = dict[str, dict[str, Any]]  # {function name: {argument: value}}

PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
NESTED = ("array", "tuple")
_STANDARDIZE = re.compile(r"[ \,\.\/\-\_\*\^]")


@dataclass(frozen=True)
class Verdict:
    valid: bool
    error: str = ""
    error_type: str = ""


OK = Verdict(True)


def standardize(text: str) -> str:
    return _STANDARDIZE.sub("", text).lower().replace("'", '"')


def _answer_type(allowed: list[Any]) -> type | None:
    return next((type(a) for a in allowed if a != ""), None)


def _type_check(
    param: str, value: Any, allowed: list[Any], expected: type, nested: type | None, description: str
) -> tuple[Verdict, bool]:
    """(verdict, is_variable): BFCL's one-level type check."""
    answer_type = _answer_type(allowed)
    is_variable = answer_type is not None and answer_type != expected
    if type(value) is expected:
        if nested is None:
            return OK, is_variable
        for allowed_item in allowed:
            fits = True
            if type(allowed_item) is list:
                for item in cast(list[Any], value):
                    verdict, _ = _type_check(param, item, allowed_item, nested, None, nested.__name__)
                    if not verdict.valid:
                        fits = False
                        break
            if fits:
                return OK, is_variable
        # BFCL returns this failure even where the value has the possible answer's type.
        return (
            Verdict(
                False,
                f"nested type check failed for {param!r}: expected {description} of {nested.__name__}",
                "type_error:nested",
            ),
            False,
        )
    if answer_type is not None and type(value) is answer_type:
        return OK, True
    return (
        Verdict(
            False,
            f"incorrect type for {param!r}: expected {description}, got {type(value).__name__}",
            "type_error:simple",
        ),
        False,
    )


def _standardized(values: list[Any]) -> list[Any]:
    return [standardize(v) if type(v) is str else v for v in values]


def _dict_check(param: str, value: dict[str, Any], allowed: list[Any]) -> Verdict:
    result = Verdict(False, f"no allowed value matches {param!r}", "dict_checker:unclear")
    for answer in allowed:
        if answer == "":
            continue
        result = OK
        for key, item in value.items():
            if key not in answer:
                result = Verdict(False, f"unexpected dict key {key!r} in {param!r}", "value_error:dict_key")
                break
            if (standardize(item) if type(item) is str else item) not in _standardized(answer[key]):
                result = Verdict(
                    False, f"invalid value for {param}.{key}: {item!r}", "value_error:dict_value"
                )
                break
        if result.valid:
            for key, options in answer.items():
                if key not in value and "" not in options:
                    result = Verdict(False, f"missing dict key {key!r} in {param!r}", "value_error:dict_key")
                    break
        if result.valid:
            return OK
    return result


def _list_dict_check(param: str, value: list[Any], allowed: list[Any]) -> Verdict:
    result = Verdict(False, f"no allowed value matches {param!r}", "list_dict_checker:unclear")
    for answer in allowed:
        if len(value) != len(answer):
            result = Verdict(
                False, f"wrong number of dictionaries in {param!r}", "value_error:list_dict_count"
            )
            continue
        failed = next(
            (
                v
                for v in (_dict_check(param, g, [e]) for g, e in zip(value, answer, strict=True))
                if not v.valid
            ),
            None,
        )
        if failed is None:
            return OK
        result = failed
    return result


def _value_check(param: str, value: Any, allowed: list[Any], expected: type, nested: type | None) -> Verdict:
    if expected is dict:
        return _dict_check(param, value, allowed)
    if expected is list and nested is dict:
        return _list_dict_check(param, value, allowed)
    if expected is str:
        if standardize(value) not in [standardize(a) for a in allowed if type(a) is str]:
            return Verdict(False, f"invalid value for {param!r}: {value!r}", "value_error:string")
        return OK
    if expected is list:
        # As BFCL: each allowed value is iterated, so an optional "" becomes [] (an empty list matches).
        options = [_standardized(list(a)) if isinstance(a, (list, str)) else a for a in allowed]
        if _standardized(list(value)) not in options:
            return Verdict(False, f"invalid value for {param!r}: {value!r}", "value_error:list/tuple")
        return OK
    if value not in allowed:
        return Verdict(False, f"invalid value for {param!r}: {value!r}", "value_error:others")
    return OK


def check_call(function: dict[str, Any], call: Call, answer: Call) -> Verdict:
    """One call against one possible answer ({name: {param: [allowed]}}) of ``function``'s docs."""
    allowed_params = next(iter(answer.values()))
    name = function["name"]
    if name not in call:
        return Verdict(False, f"function {name!r} not called", "simple_function_checker:wrong_func_name")
    params = call[name]
    if not isinstance(params, dict):
        return Verdict(False, f"arguments of {name!r} are not an object", "simple_function_checker:unclear")
    docs = function["parameters"]["properties"]
    for param in function["parameters"].get("required", []):
        if param not in params:
            return Verdict(
                False, f"missing required parameter {param!r}", "simple_function_checker:missing_required"
            )
    for param, value in params.items():
        if param not in docs or param not in allowed_params:
            return Verdict(
                False, f"unexpected parameter {param!r}", "simple_function_checker:unexpected_param"
            )
        description = docs[param]["type"]
        expected = PYTHON_TYPES[description]
        nested = PYTHON_TYPES[docs[param]["items"]["type"]] if description in NESTED else None
        if description == "float" and type(value) is int:
            value = float(value)
        verdict, is_variable = _type_check(param, value, allowed_params[param], expected, nested, description)
        if not verdict.valid:
            return verdict
        if is_variable:
            if value not in allowed_params[param]:
                return Verdict(False, f"invalid value for {param!r}: {value!r}", "value_error:others")
            continue
        verdict = _value_check(param, value, allowed_params[param], expected, nested)
        if not verdict.valid:
            return verdict
    for param, options in allowed_params.items():
        if param not in params and "" not in options:
            return Verdict(
                False,
                f"optional parameter {param!r} not provided",
                "simple_function_checker:missing_optional",
            )
    return OK


def _docs(functions: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((f for f in functions if f["name"] == name), None)


def check(
    category: str, functions: list[dict[str, Any]], calls: list[Call], ground_truth: list[Call]
) -> Verdict:
    """BFCL's verdict on ``calls`` (decoded from an answer) for an item of ``category``."""
    if category == "irrelevance":
        if calls:
            return Verdict(False, "calls a function where none applies", "irrelevance_error:decoder_success")
        return OK
    if not calls:
        return Verdict(False, "no function call", "relevance_error:decoder_failed")
    if len(calls) != len(ground_truth):
        return Verdict(False, f"{len(calls)} calls, expected {len(ground_truth)}", f"{category}:wrong_count")
    if "parallel" not in category:
        function = _docs(functions, next(iter(ground_truth[0])))
        if function is None:
            return Verdict(False, "the expected function is not documented", f"{category}:bad_item")
        return check_call(function, calls[0], ground_truth[0])
    matched: set[int] = set()
    for index, answer in enumerate(ground_truth):
        function = _docs(functions, next(iter(answer)))
        if function is None:
            return Verdict(False, "the expected function is not documented", f"{category}:bad_item")
        found = None
        for position, call in enumerate(calls):
            if position not in matched and check_call(function, call, answer).valid:
                found = position
                break
        if found is None:
            return Verdict(
                False,
                f"no call matches expected call {index} ({function['name']})",
                "parallel_function_checker_no_order:cannot_find_match",
            )
        matched.add(found)
    return OK
