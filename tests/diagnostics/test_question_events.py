"""'List the events' is answered with events (issue 39), not with a pod listing; warnings only when asked;
nothing read is no data. Names appear in no case."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.questions.replies import answer_for
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import from_text

EVENTS = """LAST SEEN   TYPE      REASON             OBJECT                 MESSAGE
2m          Warning   BackOff            pod/mill-7c9-x1        Back-off restarting failed container mill
5m          Normal    Pulled             pod/mill-7c9-x1        Container image "mill:2" already present
7m          Warning   FailedScheduling   pod/hopper-0           0/3 nodes are available: 3 Insufficient cpu.
"""
PODS = """NAME           READY   STATUS             RESTARTS   AGE
mill-7c9-x1    0/1     CrashLoopBackOff   9          1h
"""


def _answer(question: str, *outputs: ToolOutput):  # type: ignore[no-untyped-def]
    state = AnalysisState(from_text(question))
    state.intent = classify(question)
    for out in outputs:
        state.record(out)
    return answer_for(state, [], diagnosis="", root_cause="", reads=[True] * len(outputs))


def _listing(kind: str, text: str) -> ToolOutput:
    return ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": kind, "namespace": "granary"}, text)


def test_the_events_are_listed_as_events_not_pods():
    answer = _answer("list the events in namespace granary", _listing("pod", PODS), _listing("event", EVENTS))
    assert answer.columns == ["TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"]
    assert [r[1] for r in answer.rows] == ["BackOff", "Pulled", "FailedScheduling"]
    assert answer.headline.startswith("3 events in namespace granary (2 warnings)")


def test_warning_events_keep_the_warnings_and_a_count_counts_them():
    answer = _answer("show the warning events in namespace granary", _listing("event", EVENTS))
    assert [r[1] for r in answer.rows] == ["BackOff", "FailedScheduling"]
    count = _answer("how many events are there in namespace granary", _listing("event", EVENTS))
    assert count.value == 3 and count.shape == "number"


def test_events_read_from_nothing_are_no_data():
    empty = ToolOutput(
        "kubectl_get_by_kind_in_namespace", {"kind": "event", "namespace": "granary"}, "", no_data=True
    )
    answer = _answer("list the events in namespace granary", empty)
    assert answer.no_data and "No data" in answer.headline and not answer.rows
