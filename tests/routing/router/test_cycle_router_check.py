"""Issue 38: the MERA cycle's router stage checks before it spends, as the retrain task does.

After drift (``ProfileDrift.since``), a router version can be admitted only on enough labelled held-out
calls of the new traffic; a cycle that trained one anyway spent the training on a verdict known before it
(``router_version_train(check_first=True)``). With too few, the cycle's stage records the refusal without
training and the finished cycle says refused and why; with enough, it trains and admits."""

from __future__ import annotations

import pytest
from django.utils import timezone

from routing.models import ProfileDrift, RouterVersion
from routing.router.learning.runtime import forget_routers
from tests.factories import ApiKeyFactory, CycleFactory
from tests.support.ledger import call_row, fill, learned_profile, text_of
from training.models import Cycle
from training.services.cycle import cycle_stage_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_router_cache():
    forget_routers()
    yield
    forget_routers()


def _drifted_cycle(calls_after: int) -> tuple[Cycle, ProfileDrift]:
    """A learned profile with old traffic, drift found, ``calls_after`` labelled calls since; its cycle
    at the router stage (replay and SkillBook have nothing to do with the router's check)."""
    profile = learned_profile(target=0.9)
    fill(profile, 150)
    drift = ProfileDrift.objects.create(
        profile=profile, flag=True, since=timezone.now(), reason="router v1 drifted"
    )
    key = ApiKeyFactory.create()
    for i in range(calls_after):
        call_row(profile=profile, key=key, text=text_of(3000 + i), student_ok=(3000 + i) % 3 != 0)
    cycle = CycleFactory.create(profile=profile, stage=Cycle.Stage.ROUTER)
    return cycle, drift


def _finish(cycle: Cycle) -> Cycle:
    for stage in (Cycle.Stage.ROUTER, Cycle.Stage.ADMISSION):
        assert cycle_stage_run(cycle_id=cycle.pk, stage=stage) == "advanced"
    cycle.refresh_from_db()
    return cycle


def test_a_cycle_trains_no_router_for_a_drifted_profile_without_enough_new_labels():
    cycle, drift = _drifted_cycle(6)

    cycle = _finish(cycle)

    version = RouterVersion.objects.get(profile=cycle.profile)
    assert version.status == RouterVersion.Status.REJECTED
    assert version.status_reason.startswith("refused before training: only "), version.status_reason
    assert "labelled held-out calls since the drift found at" in version.status_reason
    assert version.model == {} and version.threshold is None  # nothing was trained
    assert version.admission["trained"] is False
    assert version.admission["recent"]["calls"] < 20 <= version.admission["calls"]
    assert "labelled held-out calls since the drift" in cycle.stats["router"]["error"]
    assert cycle.status == Cycle.Status.SUCCEEDED and cycle.outcome == Cycle.Outcome.REFUSED
    assert "router: not training a router" in cycle.outcome_reason, cycle.outcome_reason
    assert ProfileDrift.objects.get(pk=drift.pk).since == drift.since  # the drift is not over


def test_a_cycle_with_enough_new_labels_trains_and_admits_on_the_new_traffic():
    cycle, drift = _drifted_cycle(150)

    cycle = _finish(cycle)

    version = RouterVersion.objects.get(profile=cycle.profile)
    assert version.status == RouterVersion.Status.ACTIVE, version.status_reason
    assert version.model and version.admission["recent"]["calls"] >= 20
    assert cycle.stats["router"]["status"] == RouterVersion.Status.ACTIVE
    assert cycle.outcome == Cycle.Outcome.ADMITTED and f"router v{version.number} admitted" in (
        cycle.outcome_reason
    )
    assert ProfileDrift.objects.get(pk=drift.pk).since is None  # admitted on the new traffic
