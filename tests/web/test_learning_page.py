"""Learning page: cycles started by operators through cycle_start, runs with their loss chart,
SkillBook diffs, admissions with both sides' numbers."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import (
    AdapterFactory,
    AdmissionFactory,
    SkillBookFactory,
    TaskProfileFactory,
    TrainingRunFactory,
)
from training.models import Cycle, TrainingRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def stages(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    sent: list[tuple[int, str]] = []
    monkeypatch.setattr("training.tasks.cycle.enqueue_stage", lambda pk, stage: sent.append((pk, stage)))
    return sent


def test_an_operator_starts_one_cycle_and_a_viewer_cannot(
    login, stages, django_capture_on_commit_callbacks
) -> None:
    profile = TaskProfileFactory.create(name="extract")
    url = reverse("web:cycle-start", args=[profile.pk])
    assert login("viewer").post(url).status_code == 403
    assert not Cycle.objects.exists()

    client = login("operator")
    assert b"data-start-cycle" in client.get(reverse("web:learning")).content
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(url, {"confirm": "yes"}).status_code == 302
    cycle = Cycle.objects.get()
    assert (cycle.trigger, cycle.status, stages) == ("dashboard", "queued", [(cycle.pk, "replay")])
    client.post(url, {"confirm": "yes"})  # a second click while it runs starts nothing
    assert Cycle.objects.count() == 1
    page = client.get(reverse("web:learning"), {"profile": profile.pk})
    assert b"is still queued" in page.content and b'hx-trigger="every 2s"' in page.content


def test_runs_skillbooks_and_admissions_are_shown(login) -> None:
    profile = TaskProfileFactory.create(name="extract")
    adapter = AdapterFactory.create(profile=profile, version=1)
    progress = [{"step": s, "loss": 2.0 / s, "reward": s / 10} for s in range(1, 6)]
    TrainingRunFactory.create(
        adapter=adapter, status=TrainingRun.Status.RUNNING, step=5, total_steps=10, progress=progress
    )
    SkillBookFactory.create(
        profile=profile, version=2, text="Reply with JSON.", diff="@@ -1 +1 @@\n-Be brief.\n+Reply with JSON."
    )
    AdmissionFactory.create(
        profile=profile,
        kind="joint",
        decision="admitted",
        reason="quality not worse, cost lower",
        active_metrics={"pass_rate": 0.81},
        candidate_metrics={"pass_rate": 0.9},
        mcnemar_b=1,
        mcnemar_c=7,
        p_value=0.07,
    )
    html = login("viewer").get(reverse("web:learning"), {"profile": profile.pk}).content.decode()
    assert "data-run-step>5<" in html and html.count("<svg") == 1 and "reward" in html
    assert '<div class="del">-Be brief.</div>' in html and '<div class="add">+Reply with JSON.</div>' in html
    assert "0.81" in html and "0.9" in html and "1 / 7" in html
    assert 'hx-trigger="every 2s"' in html  # the run is still going


def test_rolling_an_adapter_back_asks_first(login) -> None:
    """Without JavaScript the first post is the confirmation step and changes nothing; the step's
    confirmed post acts (here: nothing to roll back to, said on the page it redirects to)."""
    profile = TaskProfileFactory.create(name="extract")
    active = AdapterFactory.create(profile=profile, status="active")
    url = reverse("web:adapter-rollback", args=[profile.pk])
    client = login("admin")
    asked = client.post(url)
    assert asked.status_code == 200 and b"data-confirm-step" in asked.content
    assert b"Roll the student of extract back" in asked.content
    active.refresh_from_db()
    assert active.status == "active"
    done = client.post(url, {"confirm": "yes"})
    assert done.status_code == 302 and done["Location"].endswith(f"?profile={profile.pk}")
