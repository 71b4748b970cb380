"""A state a question names by the listing's own values ("not bound", "suspended", "unpaused"), and events
counted in a relative window (issue 39, blind round three's classes). Names, kinds and values differ from the
eval cases."""

from __future__ import annotations

from datetime import UTC, datetime

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput
from diagnostics.agent.questions.replies import answer_for
from diagnostics.agent.request.intent import classify
from diagnostics.agent.request.subject import from_text

ASKED = datetime(2027, 4, 2, 15, 0, tzinfo=UTC)
VOLUMES = """NAME          STATUS      VOLUME    CAPACITY   ACCESS MODES   STORAGECLASS   AGE
cache-a       Bound       pv-a1     10Gi       RWO            local          9d
cache-b       Released    pv-b1     10Gi       RWO            local          9d
ledger-wal    Bound       pv-c1     50Gi       RWO            local          90d
"""
ROLLOUTS = """NAME        READY   UP-TO-DATE   AVAILABLE   PAUSED   AGE
checkout    3/3     3            3           true     40d
search      2/2     2            2           false    40d
thumbnail   1/1     1            1           true     12d
"""
EVENTS = """LAST SEEN   TYPE      REASON        OBJECT            MESSAGE
4m          Warning   Unhealthy     pod/kiln-0        Liveness probe failed: timeout
4m          Warning   Unhealthy     pod/kiln-0        Liveness probe failed: timeout
50m         Warning   BackOff       pod/kiln-0        Back-off restarting failed container kiln
3h          Warning   FailedMount   pod/kiln-1        MountVolume.SetUp failed for volume "glaze"
"""


def _answer(question: str, kind: str, text: str):  # type: ignore[no-untyped-def]
    state = AnalysisState(from_text(question))
    state.intent = classify(question, anchor=ASKED)
    state.record(ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": kind, "namespace": "pottery"}, text))
    return answer_for(state, [], diagnosis="", root_cause="", reads=[True])


def test_a_status_value_of_the_listing_negated_or_not() -> None:
    unbound = _answer("list the pvcs in pottery that are not bound", "persistentvolumeclaim", VOLUMES)
    assert [row[0] for row in unbound.rows] == ["cache-b"]
    assert unbound.headline.startswith("1 not bound persistentvolumeclaims in namespace pottery: cache-b.")
    released = _answer("how many pvcs in pottery are released?", "persistentvolumeclaim", VOLUMES)
    assert released.value == 1 and [row[0] for row in released.rows] == ["cache-b"]


def test_a_true_false_column_named_by_its_word() -> None:
    paused = _answer("which deployments in pottery are paused?", "deployment", ROLLOUTS)
    assert [row[0] for row in paused.rows] == ["checkout", "thumbnail"]
    unpaused = _answer("which deployments in pottery are not paused?", "deployment", ROLLOUTS)
    assert [row[0] for row in unpaused.rows] == ["search"]
    everything = _answer("list the deployments in pottery", "deployment", ROLLOUTS)
    assert len(everything.rows) == 3


def test_events_counted_in_a_relative_window_each_row_an_event() -> None:
    hour = _answer("how many warning events in pottery in the last hour?", "event", EVENTS)
    assert hour.value == 3, hour.rows
    assert hour.headline.startswith("3 warning events") and "in the last hour" in hour.headline
    assert hour.notes == ["1 older events (last seen before the window) are left out."]
    assert "No Warning event" not in hour.text()
    ten = _answer("how many warning events in pottery in the last 10 minutes?", "event", EVENTS)
    assert ten.value == 2


def test_events_named_by_their_reason_keep_that_reason_only() -> None:
    backoffs = _answer("show the BackOff events in pottery", "event", EVENTS)
    assert [row[1] for row in backoffs.rows] == ["BackOff"]
    assert backoffs.headline.startswith("1 BackOff events")
    every = _answer("show the events in pottery", "event", EVENTS)
    assert len(every.rows) == 4
