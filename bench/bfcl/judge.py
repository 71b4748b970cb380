"""Two verdicts on one answer to a BFCL item: the live one (the profile's weak ``tool_args`` schema check,
what the gateway sees) and BFCL's correctness against the possible answers. Also the item's split and a
reference answer built from its possible answers."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from bench.bfcl.checker import Call, check
from bench.bfcl.data import Item
from bench.bfcl.requests import DecodeError, decode, request, tool_call_message
from routing.verifiers import build_verifier

SPLITS = ("train", "calibration", "heldout")
# The live verifiers a tool-call profile may have. ``schema`` (the default): declared functions,
# schema-valid arguments; weak on purpose: a schema-valid call with wrong values, or no call at all,
# passes. ``values``: also reads a call written as JSON text (the constrained answer), asks that its
# values come from the conversation and that the request's values reach it
# (routing/verifiers/tool_grounding.py): stronger, and still no model and no possible answer.
LIVE_VERIFIERS: dict[str, dict[str, Any]] = {
    "schema": {"kind": "tool_args"},
    "values": {"kind": "tool_args", "content_calls": True, "check_values": True},
}


@dataclass(frozen=True)
class Judgement:
    live: bool  # the weak verifier's verdict
    live_detail: str
    correct: bool  # BFCL's
    detail: str
    error_type: str


def judge(item: Item, message: dict[str, Any], live_verifier: Any | None = None) -> Judgement:
    """``live_verifier``: a routing verifier (default: ``tool_args``, as the tool-call profile has)."""
    if live_verifier is None:
        live_verifier = build_verifier({"kind": "tool_args"})
    live = live_verifier.verify(request=request(item), message=message)
    try:
        calls = decode(item, message)
    except DecodeError as exc:
        return Judgement(live.passed, live.detail, False, str(exc), "decode_error")
    verdict = check(item.category, item.functions, calls, item.ground_truth)
    return Judgement(live.passed, live.detail, verdict.valid, verdict.error, verdict.error_type)


def correct(item: Item, message: dict[str, Any]) -> bool:
    """BFCL's correctness alone (no live verdict): what the best-of-n teacher filters its answers by."""
    try:
        calls = decode(item, message)
    except DecodeError:
        return False
    return check(item.category, item.functions, calls, item.ground_truth).valid


def split(messages: list[dict[str, Any]], *, heldout_shards: int, calibration_shards: int = 4) -> str:
    """train, calibration or heldout. Held-out is the learning cycle's own rule (training.services.cycle
    .calls.split_of: one prompt hash in ``heldout_shards``), so a held-out item is never trained on; of
    the rest, one in ``calibration_shards`` (by another part of the hash) calibrates the router."""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).digest()
    if heldout_shards > 0 and int.from_bytes(digest[:4], "big") % heldout_shards == 0:
        return "heldout"
    if calibration_shards > 0 and int.from_bytes(digest[4:8], "big") % calibration_shards == 0:
        return "calibration"
    return "train"


def reference_calls(item: Item) -> list[Call]:
    """One correct answer: per expected call, each parameter's first allowed value (omitted where the
    only allowed value is ``""``, i.e. the parameter may be left out)."""
    calls: list[Call] = []
    for answer in item.ground_truth:
        name, params = next(iter(answer.items()))
        calls.append({name: _arguments(params)})
    return calls


_OMIT = object()


def _arguments(params: dict[str, list[Any]]) -> dict[str, Any]:
    arguments = {}
    for param, allowed in params.items():
        value = _first(allowed)
        if value is not _OMIT:
            arguments[param] = value
    return arguments


def _first(allowed: list[Any]) -> Any:
    """The first allowed value; a dict (or a list of dicts) of allowed values becomes its own first."""
    value = next((v for v in allowed if v != ""), _OMIT)
    if isinstance(value, dict):
        return _arguments(value)
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [_arguments(v) for v in value]
    return value


def reference_message(item: Item) -> dict[str, Any]:
    """The reference answer as an assistant message (plain text for irrelevance)."""
    if item.category == "irrelevance":
        return {"role": "assistant", "content": "None of the given functions applies to this request."}
    return tool_call_message(item, reference_calls(item))
