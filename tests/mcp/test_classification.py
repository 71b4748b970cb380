"""Read or write from the annotations, the operator's word over them, and changes held for review
(diagnostics/mcp/classify.py; plain values, no server)."""

from __future__ import annotations

from typing import Any

import pytest

from diagnostics.mcp import classify, vetting
from diagnostics.mcp.classify import READ, WRITE, Standing


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"readOnlyHint": True}, READ),
        ({"readOnlyHint": True, "destructiveHint": True}, READ),  # the hints alone; vetted_class: write
        ({"readOnlyHint": False, "destructiveHint": False}, WRITE),
        ({"destructiveHint": False, "idempotentHint": True}, WRITE),  # no readOnlyHint: the default is false
        ({"title": "Read things"}, WRITE),
        ({"readOnlyHint": "true"}, WRITE),  # only the JSON true counts
        (None, WRITE),  # unannotated: destructive by the spec's defaults
        ({}, WRITE),
    ],
)
def test_only_readonlyhint_true_makes_a_read_tool(annotations, expected):
    klass, why = classify.declared_class(annotations)
    assert klass == expected and why


def test_the_operator_overrides_and_the_allow_list_decide_over_the_annotations():
    read = Standing(declared=READ)
    assert classify.effective(read) == READ
    assert classify.effective(Standing(declared=READ, override=classify.DEMOTE)) == WRITE
    assert classify.effective(Standing(declared=WRITE, override=classify.PROMOTE)) == READ
    assert classify.effective(Standing(declared=READ, allowed=False)) == classify.OFF
    assert "PROMOTED" in classify.why(Standing(declared=WRITE, override=classify.PROMOTE), "x")


def test_first_sight_waits_for_review_a_change_toward_read_is_held_and_toward_write_applies_at_once():
    # First sight is a change too: a new tool, on the first connect or a later one, runs nowhere yet.
    for first_sync in (True, False):
        first = classify.reconcile(previous=None, live=READ, first_sync=first_sync)
        assert first == Standing(declared=READ, reviewed=False) and classify.effective(first) == classify.OFF
        assert "waiting for an operator" in classify.why(first, "readOnlyHint: true")
    # A reviewed write tool turning read is held (stays write).
    held = classify.reconcile(previous=Standing(declared=WRITE), live=READ, first_sync=False)
    assert classify.effective(held) == WRITE and held.pending == READ
    # Toward write: at once, whatever was held.
    assert (
        classify.reconcile(previous=Standing(declared=READ), live=WRITE, first_sync=False).declared == WRITE
    )
    assert classify.reconcile(previous=held, live=WRITE, first_sync=False) == Standing(declared=WRITE)


def test_the_fingerprint_covers_schema_annotations_and_description():
    base: dict[str, Any] = {
        "name": "t",
        "description": "d",
        "input_schema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    }
    printed = classify.fingerprint(**base)
    changes: list[dict[str, Any]] = [
        {"description": "d2"},
        {"input_schema": {"type": "object", "properties": {"x": {}}}},
        {"annotations": {"readOnlyHint": False}},
    ]
    for change in changes:
        assert classify.fingerprint(**{**base, **change}) != printed


@pytest.mark.parametrize(
    ("name", "description", "annotations", "expected", "flag"),
    [
        ("read_text_file", "Read the complete contents of a file.", {"readOnlyHint": True}, READ, ""),
        ("get_file_info", "Retrieve metadata: size, last modified time.", {"readOnlyHint": True}, READ, ""),
        ("git_log", "Shows the commit logs.", {"readOnlyHint": True}, READ, ""),
        ("purge_cache", "Cache statistics.", {"readOnlyHint": True}, WRITE, "name says 'purge'"),
        ("purgeCache", "", {"readOnlyHint": True}, WRITE, "name says 'purge'"),
        ("purgecache", "", {"readOnlyHint": True}, WRITE, "name says 'purge'"),
        ("DELETE_USER", "", {"readOnlyHint": True}, WRITE, "name says 'delete'"),
        ("HTTPDelete", "", {"readOnlyHint": True}, WRITE, "name says 'delete'"),
        ("kubectl.scale", "", {"readOnlyHint": True}, WRITE, "name says 'scale'"),
        ("de1ete_fi1e", "", {"readOnlyHint": True}, WRITE, "name says 'delete'"),
        ("status", "Permanently deletes every row.", {"readOnlyHint": True}, WRITE, "says 'delete'"),
        ("status", "Use this to purge the cache.", {"readOnlyHint": True}, WRITE, "description says 'purge'"),
        ("status", "Permanently d\u0435letes rows.", {"readOnlyHint": True}, WRITE, "says 'delete'"),
        ("status", "\uff44\uff45\uff4c\uff45\uff54\uff45\uff53 all", {"readOnlyHint": True}, WRITE, "delete"),
        ("status", "Reads.", {"readOnlyHint": True, "destructiveHint": True}, WRITE, "contradictory hints"),
    ],
)
def test_hints_that_say_read_are_believed_only_when_the_words_agree(
    name, description, annotations, expected, flag
):
    klass, why, flags = classify.vetted_class(name=name, description=description, annotations=annotations)
    assert klass == expected and (flag in " ".join(flags) if flag else flags == []), (klass, flags)
    assert why


def test_names_follow_the_spec_and_text_loses_its_controls():
    assert vetting.name_problem("ok.name-1_") == "" and vetting.name_problem("a" * 128) == ""
    assert "U+0430" in vetting.name_problem("st\u0430tus") and "129" in vetting.name_problem("a" * 129)
    assert vetting.name_problem("a b") and vetting.name_problem("a/b") and vetting.name_problem("")
    assert vetting.name_problem("x\u200by") and vetting.name_problem("x\x1b[31m")
    assert vetting.clean_text("a\x1b[31mred\x1b[0m\x07b\x1b]0;title\x07c\u202ed\r\n") == "aredbcd\n"
    assert vetting.clean_text("one\u2028two\u2029three") == "one\ntwo\nthree"  # no hidden line breaks
    skeleton = vetting.skeleton
    assert skeleton("delete_file") == skeleton("De1ete-Fi1e") == skeleton("delete.file")
    assert vetting.skeleton("rnodel") == vetting.skeleton("model")
