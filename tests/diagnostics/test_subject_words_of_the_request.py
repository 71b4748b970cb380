"""Issue 39: words of the request are not taken as object names. After a kind word, an operation done to
objects of that kind ("the node drain", "the deployment rollout", "pod scheduling": kubectl's own verbs in
a compound noun) names nothing; a plain word after a kind word ("deployment checkout") is a weak name that
does not outrank a name shaped like an object's or crowd out the name the sentence gives; and a word of the
request that a service is also called ("search", "events") names it where a noun phrase puts it before a
kind word ("the search service"), never as the request's verb ("search pods for ..."). Phrasings and names
are this file's own."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.names import parse_free_text

ASKED = datetime(2027, 2, 3, 10, 0, tzinfo=UTC)
_OPERATIONS = {"drain", "draining", "rollout", "rollouts", "scheduling", "eviction", "upgrade", "cordon"}


@pytest.mark.parametrize(
    ("text", "subject"),
    [
        ("why did the node drain fail on wk-pool-3", "wk-pool-3"),
        ("the deployment rollout of tallyman is stuck", "tallyman"),
        ("pod scheduling fails for quillpad since noon", "quillpad"),
        ("after the node upgrade, brightline-web returns 502", "brightline-web"),
        ("pod eviction keeps hitting ferrous-api", "ferrous-api"),
        ("node cordon on gke-pool-b-9x2 left orders-web pending", "gke-pool-b-9x2"),
    ],
)
def test_an_operation_after_a_kind_word_is_no_name(text: str, subject: str) -> None:
    parsed = parse_free_text(text)
    assert parsed.name == subject, (text, parsed)
    assert not _OPERATIONS & {n.lower() for n in parsed.names}, parsed
    names = classify(text, anchor=ASKED).names
    assert subject in names and not _OPERATIONS & set(names), (text, names)


def test_a_question_about_an_operation_alone_names_nothing() -> None:
    for text in ("the node drain is stuck", "deployment rollouts are stuck since 9am"):
        parsed = parse_free_text(text)
        assert (parsed.kind, parsed.name) == ("", ""), (text, parsed)
        assert classify(text, anchor=ASKED).names == [], text
    # A plural kind word is followed by a state, not an operation: the count still counts pods.
    assert classify("how many pods terminating right now?", anchor=ASKED).object_kind == "pod"


def test_a_plain_word_after_a_kind_word_is_a_weak_name() -> None:
    # Alone, it is the subject with its kind ...
    assert (
        parse_free_text("is deployment tallyman healthy").kind,
        parse_free_text("is deployment tallyman healthy").name,
    ) == ("deployment", "tallyman")
    # ... but it does not crowd out the plain word the sentence names, nor beat a shaped name.
    names = classify("pod sidecar of quillpad restarts", anchor=ASKED).names
    assert "quillpad" in names and "sidecar" in names, names
    assert parse_free_text("node rack after wk-pool-3 went down").name == "wk-pool-3"


@pytest.mark.parametrize(
    ("text", "name", "kind"),
    [
        ("errors in the search service since the deploy", "search", "service"),
        ("is the search deployment healthy?", "search", "deployment"),
        ("why do our events pods restart", "events", "pod"),
    ],
)
def test_a_word_of_the_request_names_the_object_a_noun_phrase_puts_before_a_kind_word(
    text: str, name: str, kind: str
) -> None:
    parsed = parse_free_text(text)
    assert (parsed.kind, parsed.name) == (kind, name), (text, parsed)
    assert name in classify(text, anchor=ASKED).names, text


def test_a_word_of_the_request_as_its_verb_names_nothing() -> None:
    for text in (
        "search pods for 'deadline exceeded'",
        "list pods in namespace shop",
        "search the quillpad logs for timeout",
    ):
        parsed = parse_free_text(text)
        assert not {"search", "list"} & {n.lower() for n in parsed.names}, (text, parsed)
        assert not {"search", "list"} & set(classify(text, anchor=ASKED).names), text
