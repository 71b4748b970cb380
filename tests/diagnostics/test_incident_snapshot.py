"""An incident's page and API read the incident and its diagnoses from one moment of the database.

The race this guards: a worker finishes the diagnosis (trajectory succeeded, incident diagnosed, one
commit) between the page's read of the incident and its read of the trajectories. The page then saw
"investigating" with a finished trajectory, stopped following live, and kept the stale status for
good. Here a real second connection (another thread) commits the finish exactly between the two
queries; the read must show the state before it, or the state after it, never a mix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections

from diagnostics import selectors, services
from diagnostics.models import Incident, Trajectory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _finish_from_another_connection(trajectory_id: int) -> None:
    try:
        trajectory = Trajectory.objects.get(pk=trajectory_id)
        services.trajectory_finish(
            trajectory=trajectory,
            mode=Trajectory.Mode.ANALYZERS,
            diagnosis="the api's config holds a string where a number belongs",
            root_cause="request_timeout_s",
            findings=[],
            tool_calls=1,
            no_data_calls=0,
        )
    finally:
        connections.close_all()


def _between_first_two_queries(action: Callable[[], None]) -> Callable[..., Any]:
    """A query wrapper that runs ``action`` once, right after the first query on the incidents table."""
    done = threading.Event()

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if not done.is_set() and 'FROM "diagnostics_incident"' in sql:
            done.set()
            action()
        return result

    return wrapper


def test_a_diagnosis_finished_between_the_queries_is_seen_whole_or_not_at_all(no_enqueue) -> None:
    incident = services.incident_open(title="The shop answers 502", environment="fake")
    trajectory = services.trajectory_claim(trajectory_id=incident.trajectories.get().pk)
    assert trajectory is not None
    writer = threading.Thread(target=_finish_from_another_connection, args=(trajectory.pk,))

    def commit_the_finish_now() -> None:
        writer.start()
        # PostgreSQL: the writer commits while the read goes on. SQLite: the read's transaction holds
        # the lock, so the writer waits for it to end; give it a moment to try.
        writer.join(timeout=2 if connection.vendor == "sqlite" else 30)

    with connection.execute_wrapper(_between_first_two_queries(commit_the_finish_now)):
        read = selectors.incident_detail(incident_id=incident.pk)
    writer.join(timeout=30)
    assert not writer.is_alive()

    assert read is not None
    seen = (read.status, [t.status for t in read.trajectories.all()])
    before = (Incident.Status.INVESTIGATING, [Trajectory.Status.RUNNING])
    after = (Incident.Status.DIAGNOSED, [Trajectory.Status.SUCCEEDED])
    assert seen in (before, after), seen
    # The finish did commit: a read now sees it whole.
    again = selectors.incident_detail(incident_id=incident.pk)
    assert again is not None
    assert (again.status, [t.status for t in again.trajectories.all()]) == after
