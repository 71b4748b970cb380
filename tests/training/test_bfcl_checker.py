"""The BFCL task set: the port of BFCL's matching rules, judged on BFCL's own items, side by side with
BFCL's checker where the package is installed; decoding answers; the live verdict beside BFCL's; splits."""

from __future__ import annotations

import copy
import importlib
import json
import random
import sys
import types

import pytest

from bench.bfcl.checker import check, standardize
from bench.bfcl.data import CATEGORIES, DATA_FILE, BfclDataError, Item, load_items
from bench.bfcl.judge import judge, reference_calls, reference_message, split
from bench.bfcl.requests import DecodeError, decode, json_schema, request, tool_call_message

ITEMS = load_items()
BY_ID = {item.id: item for item in ITEMS}


def item(id_: str) -> Item:
    return BY_ID[id_]


def test_the_repository_carries_every_category_with_its_possible_answers():
    counts = {c: sum(i.category == c for i in ITEMS) for c in CATEGORIES}
    assert counts == {
        "simple": 400,
        "multiple": 200,
        "parallel": 200,
        "parallel_multiple": 200,
        "irrelevance": 240,
    }
    assert all(i.ground_truth for i in ITEMS if i.category != "irrelevance")
    assert not any(i.ground_truth for i in ITEMS if i.category == "irrelevance")
    assert (DATA_FILE.parent / "LICENSE").read_text().startswith("Apache License")


def test_reference_answers_built_from_the_possible_answers_pass_and_their_perturbations_fail():
    relevant = [i for i in ITEMS if i.category != "irrelevance"]
    passing = [
        i.id for i in relevant if check(i.category, i.functions, reference_calls(i), i.ground_truth).valid
    ]
    # Two items' possible answers name a parameter their function docs do not have; BFCL fails them too.
    assert len(passing) >= len(relevant) - 2
    for i in relevant[::7]:
        calls = reference_calls(i)
        name = next(iter(calls[0]))
        extra = copy.deepcopy(calls)
        extra[0][name]["not_a_parameter"] = 1
        assert not check(i.category, i.functions, extra, i.ground_truth).valid
        assert not check(i.category, i.functions, calls + calls[:1], i.ground_truth).valid


def test_simple_values_are_compared_as_bfcl_does():
    simple = item("simple_python_0")  # calculate_triangle_area(base=10, height=5, unit="units" or omitted)
    assert check(
        "simple",
        simple.functions,
        [{"calculate_triangle_area": {"base": 10, "height": 5}}],
        simple.ground_truth,
    ).valid
    wrong = check(
        "simple",
        simple.functions,
        [{"calculate_triangle_area": {"base": 11, "height": 5}}],
        simple.ground_truth,
    )
    assert (wrong.valid, wrong.error_type) == (False, "value_error:others")
    missing = check(
        "simple", simple.functions, [{"calculate_triangle_area": {"base": 10}}], simple.ground_truth
    )
    assert missing.error_type == "simple_function_checker:missing_required"
    as_text = check(
        "simple",
        simple.functions,
        [{"calculate_triangle_area": {"base": "10", "height": 5}}],
        simple.ground_truth,
    )
    assert as_text.error_type == "type_error:simple"
    unit = check(
        "simple",
        simple.functions,
        [{"calculate_triangle_area": {"base": 10, "height": 5, "unit": " U-nits "}}],
        simple.ground_truth,
    )
    assert unit.valid  # case, spaces and -_ are ignored in strings
    assert standardize("April 1, 2024") == standardize("april 1 2024")


def test_an_int_passes_for_a_float_but_not_a_bool_for_an_int():
    target = next(
        i
        for i in ITEMS
        if i.category == "simple"
        and any(p.get("type") == "float" for p in i.functions[0]["parameters"]["properties"].values())
    )
    calls = reference_calls(target)
    _, args = next(iter(calls[0].items()))
    param = next(
        k
        for k, v in target.functions[0]["parameters"]["properties"].items()
        if v["type"] == "float" and k in args
    )
    if float(args[param]).is_integer():
        args[param] = int(args[param])
        assert check("simple", target.functions, calls, target.ground_truth).valid
    integer = item("simple_python_0")
    assert not check(
        "simple",
        integer.functions,
        [{"calculate_triangle_area": {"base": True, "height": 5}}],
        integer.ground_truth,
    ).valid


def test_parallel_calls_match_in_any_order_and_irrelevance_wants_no_call():
    parallel = next(
        i
        for i in ITEMS
        if i.category == "parallel"
        and len(i.ground_truth) >= 2
        and check("parallel", i.functions, reference_calls(i), i.ground_truth).valid
    )
    calls = reference_calls(parallel)
    assert check("parallel", parallel.functions, calls[::-1], parallel.ground_truth).valid
    assert (
        check("parallel", parallel.functions, calls[:-1], parallel.ground_truth).error_type
        == "parallel:wrong_count"
    )
    irrelevant = next(i for i in ITEMS if i.category == "irrelevance")
    assert check("irrelevance", irrelevant.functions, [], []).valid
    name = irrelevant.functions[0]["name"]
    assert not check("irrelevance", irrelevant.functions, [{name: {}}], []).valid


def test_answers_decode_from_tool_calls_hermes_blocks_and_bare_json():
    i = item("parallel_multiple_0")  # math_toolkit.sum_of_multiples, math_toolkit.product_of_primes
    expected = reference_calls(i)
    as_tool_calls = tool_call_message(i, expected)
    assert as_tool_calls["tool_calls"][0]["function"]["name"] == "math_toolkit_sum_of_multiples"
    assert decode(i, as_tool_calls) == expected  # names mapped back to BFCL's
    hermes = "".join(
        f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>\n"
        for c in expected
        for n, a in c.items()
    )
    assert decode(i, {"role": "assistant", "content": hermes}) == expected
    bare = json.dumps([{"name": n, "arguments": a} for c in expected for n, a in c.items()])
    assert decode(i, {"role": "assistant", "content": f"```json\n{bare}\n```"}) == expected
    assert decode(i, {"role": "assistant", "content": "I cannot help with that."}) == []
    with pytest.raises(DecodeError):
        decode(i, {"role": "assistant", "content": "<tool_call>{not json</tool_call>"})
    with pytest.raises(DecodeError):
        decode(i, {"role": "assistant", "tool_calls": [{"function": {"name": "x", "arguments": "{oops"}}]})


def test_the_weak_live_verdict_passes_a_schema_valid_call_that_bfcl_finds_wrong():
    i = item("simple_python_0")
    wrong = tool_call_message(i, [{"calculate_triangle_area": {"base": 3, "height": 4}}])
    verdict = judge(i, wrong)
    assert (verdict.live, verdict.correct, verdict.error_type) == (True, False, "value_error:others")
    right = judge(i, reference_message(i))
    assert (right.live, right.correct) == (True, True)
    text = judge(i, {"role": "assistant", "content": "The area is 25."})
    assert (text.live, text.correct) == (True, False)  # no call is fine for tool_args, not for BFCL
    irrelevant = next(x for x in ITEMS if x.category == "irrelevance")
    assert judge(irrelevant, reference_message(irrelevant)).correct


def test_requests_carry_the_docs_as_openai_tools_with_json_schema_types():
    i = item("parallel_multiple_0")
    body = request(i, metadata={"task": "tool-call"})
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == ["math_toolkit_sum_of_multiples", "math_toolkit_product_of_primes"]
    params = body["tools"][0]["function"]["parameters"]
    assert params["type"] == "object" and params["properties"]["multiples"] == {
        "type": "array",
        "items": {"type": "integer"},
        "description": "The numbers to find multiples of.",
    }
    assert (
        body["messages"][0]["role"] == "system"
        and "math_toolkit_sum_of_multiples" in body["messages"][0]["content"]
    )
    assert body["messages"][1:] == i.messages and body["metadata"] == {"task": "tool-call"}
    # A property called "type" is a name, not a type.
    schema = json_schema({"type": "dict", "properties": {"type": {"type": "float"}, "x": {"type": "any"}}})
    assert schema == {"type": "object", "properties": {"type": {"type": "number"}, "x": {}}}


@pytest.mark.django_db
def test_the_heldout_split_is_the_cycles_own_and_calibration_is_disjoint(settings):
    from training.services.cycle.calls import split_of

    shards = settings.SKILLGATE["CYCLE"]["HELDOUT_SHARDS"]
    splits = {}
    for i in ITEMS:
        messages = request(i)["messages"]
        splits[i.id] = split(messages, heldout_shards=shards)
        assert (splits[i.id] == "heldout") == (split_of(messages) == "heldout")
    share = {
        s: sum(v == s for v in splits.values()) / len(splits) for s in ("train", "calibration", "heldout")
    }
    assert 0.12 < share["heldout"] < 0.28 and 0.1 < share["calibration"] < 0.3 and share["train"] > 0.45


def test_bad_data_lines_are_refused_with_the_line_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "x", "category": "simple"}) + "\n")
    with pytest.raises(BfclDataError, match="line 1"):
        load_items(path)
    path.write_text(
        json.dumps({"id": "x", "category": "web", "messages": [], "functions": [], "ground_truth": []})
    )
    with pytest.raises(BfclDataError, match="unknown BFCL category"):
        load_items(path)
    with pytest.raises(BfclDataError, match="unknown BFCL categories"):
        load_items(categories=("live_simple",))


def _bfcl_ast_checker():
    """BFCL's own checker from the installed package; its model registry (which imports every
    provider's SDK) replaced by the one entry the checker reads for names with dots."""
    pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (pip install --no-deps bfcl-eval)")
    registry = types.ModuleType("bfcl_eval.constants.model_config")
    registry.MODEL_CONFIG_MAPPING = {"port": types.SimpleNamespace(underscore_to_dot=False)}
    saved = sys.modules.get(registry.__name__)
    sys.modules[registry.__name__] = registry
    try:
        module = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
        language = importlib.import_module("bfcl_eval.constants.enums").Language.PYTHON
    finally:
        if saved is None:
            sys.modules.pop(registry.__name__, None)
        else:
            sys.modules[registry.__name__] = saved
    return lambda i, calls: module.ast_checker(
        i.functions, calls, i.ground_truth, language, i.category, "port"
    )["valid"]


def _perturb(calls, rng):
    calls = copy.deepcopy(calls)
    call = rng.choice(calls)
    args = call[next(iter(call))]
    op = rng.randrange(6)
    key = rng.choice(list(args)) if args else None
    if key is None or op == 5:
        args["bogus"] = 1
    elif op == 0:
        del args[key]
    elif op == 1 and isinstance(args[key], (int, float)) and not isinstance(args[key], bool):
        args[key] += 1
    elif op == 1 and isinstance(args[key], str):
        args[key] = args[key].upper() + " x"
    elif op == 1 and isinstance(args[key], list):
        args[key] = args[key][:-1]
    elif op == 2:
        calls.reverse()
    elif op == 3:
        args[key] = str(args[key]) if not isinstance(args[key], str) else 3
    else:
        args[key] = args[key].title() if isinstance(args[key], str) else args[key]
    return calls


def test_the_port_agrees_with_bfcls_own_checker_on_its_items_and_perturbed_answers():
    theirs = _bfcl_ast_checker()
    rng = random.Random(0)
    disagreements, n = [], 0
    for i in ITEMS:
        if i.category == "irrelevance":
            continue
        reference = reference_calls(i)
        for calls in [reference] + [_perturb(reference, rng) for _ in range(5)]:
            n += 1
            if check(i.category, i.functions, calls, i.ground_truth).valid != theirs(i, calls):
                disagreements.append((i.id, calls))
    assert n == 6000 and disagreements == []
