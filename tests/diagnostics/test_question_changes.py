"""'What changed' is its own intent (issue 39): rollouts, scaling and stated changes in order, within the
window; not a pod listing, not a status verdict; nothing read is no data. Names appear in no case."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.questions.replies import answer_for
from diagnostics.agent.request.intent import CHANGES, classify
from diagnostics.agent.request.subject import from_text

ASKED = datetime(2030, 3, 14, 12, 0, tzinfo=UTC)
EVENTS = """LAST SEEN   TYPE      REASON              OBJECT                    MESSAGE
20m         Normal    ScalingReplicaSet   deployment/loom           Scaled up replica set loom-5f6 to 3
21m         Normal    Pulled              pod/loom-5f6-aa1          Container image "loom:4" already present
"""
CHANGELOG = """2030-03-13 09:00:00 INFO changed loom.threads: 8 -> 64 (by ci-bot)
2030-03-10 09:00:00 INFO changed loom.threads: 4 -> 8 (by ana)
2030-03-13 10:00:00 INFO request served in 12 ms
"""


@pytest.mark.parametrize(
    "question",
    [
        "what changed in namespace weaving yesterday?",
        "any changes to loom since monday?",
        "what was deployed today",
    ],
)
def test_what_changed_is_the_changes_intent(question):
    intent = classify(question, anchor=ASKED)
    assert intent.kind == CHANGES and "changed" not in intent.names


@pytest.mark.parametrize(
    "question", ["why is loom failing?", "list the events in weaving", "when did loom restart?"]
)
def test_other_questions_keep_their_intent(question):
    assert classify(question, anchor=ASKED).kind != CHANGES


def _answer(question: str, *outputs: ToolOutput):  # type: ignore[no-untyped-def]
    state = AnalysisState(from_text(question))
    state.intent = classify(question, anchor=ASKED)
    for out in outputs:
        state.record(out)
    return answer_for(state, [], diagnosis="", root_cause="", reads=[True] * len(outputs))


def test_the_changes_in_the_window_are_listed_in_order_with_the_rollout_events():
    events = ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": "event", "namespace": "weaving"}, EVENTS)
    log = ToolOutput("read_config", {"service": "loom"}, CHANGELOG)
    answer = _answer("what changed in namespace weaving yesterday?", events, log)
    whats = [e["what"] for e in answer.events]
    assert any("threads: 8 -> 64" in w for w in whats), whats
    assert not any("4 -> 8" in w for w in whats), whats  # three days before: outside "yesterday"
    assert not any("request served" in w or "Pulled" in w for w in whats), whats
    assert any(w.startswith("ScalingReplicaSet") for w in whats), whats
    assert answer.shape == "timeline" and answer.intent == "changes"


def test_nothing_read_is_no_data_not_nothing_changed():
    empty = ToolOutput(
        "kubectl_get_by_kind_in_namespace", {"kind": "event", "namespace": "weaving"}, "", no_data=True
    )
    answer = _answer("what changed in namespace weaving yesterday?", empty)
    assert answer.no_data and "not the same as nothing changed" in answer.headline


REVISIONS = """NAME            DESIRED   CURRENT   READY   AGE   CONTAINERS   IMAGES      SELECTOR
loom-5f6        3         3         3       2d    loom         loom:4      app=loom
loom-4c1        0         0         0       30d   loom         loom:3      app=loom
"""


def test_a_rollout_dated_by_its_age_is_in_or_outside_the_date_asked_about():
    revisions = ToolOutput(
        "kubectl_get_by_kind_in_namespace", {"kind": "replicaset", "namespace": "weaving"}, REVISIONS
    )
    # Asked 2030-03-14 12:00; "2d" is 2 to 3 days before: 2030-03-11 12:00 .. 2030-03-12 12:00.
    on = _answer("what changed in namespace weaving on 2030-03-12?", revisions)
    assert on.value == 1 and "loom rolled out image loom:4" in on.headline
    assert "between 2030-03-11 and 2030-03-12" in on.headline
    off = _answer("what changed in namespace weaving on 2030-03-05?", revisions)
    assert off.value == 0
    assert off.headline.startswith("No change seen in namespace weaving (on 2030-03-05)")
    assert "The nearest, outside it: loom rolled out image loom:4" in off.headline
