"""The live loop through the running gateway (issue 38's "Done when"): an admitted version, then a shifted
stream on which the student is wrong on one easy call in four (its verifier passes them all). Background
teacher samples (a real Celery worker) label the student's answers; the hourly drift task
(``tasks.router_drift_check``) flags or holds the version (``drift.HELD``: its correctness leaning towards
drift while another test found drift) within ``FLAGGED_WITHIN`` calls and queues a retrain,
which the worker runs and admission refuses (too few labelled held-out calls of the new traffic); the
profile is served by its safe fixed policy, the teacher. Over the whole stream the served answers are
never below the target beyond the confidence margin (``bench.router_shift.served_margin``: the served
pass rate minus the required one, and its upper bound at z=1, paired with the teacher)."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from bench.router_shift import served_margin
from bench.support.openai_stub import Reply
from routing import tasks
from routing.models import Invocation, ProfileDrift, RouterVersion
from routing.router.learning.calibration import Target
from routing.router.learning.features import hashing_spec
from routing.router.versions.drift import is_held
from routing.router.versions.services import router_version_admit, router_version_train
from tests.support.celery_worker import celery_worker
from tests.support.ledger import fill, learned_profile, text_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BATCH = 10  # calls between drift checks
FLAGGED_WITHIN = 40  # calls of the shifted stream
STREAM = 150  # calls in all
RIGHT = {"total": 42}


def shifted(body: dict[str, object]) -> Reply:
    """The teacher is right; the student answers in the schema, wrong on every fourth easy receipt and on
    every hard statement."""
    text = str(body["messages"][0]["content"])  # type: ignore[index]
    number = int(text.rstrip(".").split()[-1]) if text.startswith("Read the total") else 0
    wrong = "student" in str(body["model"]) and (number % 4 == 0)
    return Reply(content=json.dumps({"total": 7} if wrong else RIGHT))


def ask(gateway_url: str, key: str, text: str) -> tuple[str, bool]:
    response = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json={"model": "auto", "messages": [{"role": "user", "content": text}]},
        headers={"Authorization": f"Bearer {key}", "X-Skillgate-Task": "totals"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    answer = json.loads(response.json()["choices"][0]["message"]["content"])
    return response.headers["x-skillgate-route"], answer == RIGHT


def test_a_shifted_stream_is_flagged_retrained_or_held_and_never_served_below_target(
    gateway_url, backends, api_key, stub, settings
):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": BATCH, "MIN_HELDOUT_CALLS": 15},
    }
    profile = learned_profile(teacher_sample_rate=1.0, student_sample_rate=0.0)
    fill(profile)
    version = router_version_admit(
        version=router_version_train(profile=profile, spec=hashing_spec(ngram_dims=256))
    )
    assert version.status == RouterVersion.Status.ACTIVE, version.status_reason
    stub.responder = shifted

    served: list[bool] = []
    routes: list[str] = []
    pending = Invocation.SampleState.QUEUED, Invocation.SampleState.RUNNING
    flagged_after = None
    with celery_worker("drift-live-loop", loglevel="WARNING") as worker:
        while flagged_after is None and len(served) < FLAGGED_WITHIN:
            for _ in range(BATCH):
                route, ok = ask(gateway_url, api_key.raw, text_of(5000 + len(served)))
                served.append(ok)
                routes.append(route)
            done = lambda: not Invocation.objects.filter(sample_state__in=pending).exists()  # noqa: E731
            worker.wait_until("the teacher samples", done, 120)
            tasks.router_drift_check(version.pk)  # flags or holds it, marks the shift, queues a retrain
            version.refresh_from_db()
            if version.drift_flag or is_held(version.drift_flag, version.drift_reason):
                flagged_after = len(served)
        assert flagged_after is not None, version.drift_reason
        assert ProfileDrift.objects.get(profile=profile).since is not None

        retrained = lambda: RouterVersion.objects.filter(  # noqa: E731
            profile=profile, number=2, status__in=["rejected", "active", "failed"]
        ).first()
        worker.wait_until("the retrain", lambda: retrained() is not None, 120)
        candidate = retrained()
        assert candidate is not None, list(
            RouterVersion.objects.values_list("number", "status", "status_reason")
        )
        # too few labelled held-out calls of the new traffic to vouch for a candidate: refused
        assert candidate.status == RouterVersion.Status.REJECTED, candidate.status_reason
        assert "labelled held-out calls since the drift" in candidate.status_reason

        while len(served) < STREAM:  # the safe fixed policy serves once the gateway's lookup expires
            route, ok = ask(gateway_url, api_key.raw, text_of(5000 + len(served)))
            served.append(ok)
            routes.append(route)

    after = routes[-50:]
    assert after == ["teacher"] * 50 and all(served[-50:])
    right = np.asarray(served, dtype=bool)
    point, upper = served_margin(right, np.ones(len(right), dtype=bool), Target(0.97, True, None, 1.0))
    wrong = int((~right).sum())
    assert upper >= 0, (flagged_after, wrong, point, upper)  # not below the target beyond the margin
    assert 0 < wrong <= FLAGGED_WITHIN  # the wrong answers were served before the flag took effect
