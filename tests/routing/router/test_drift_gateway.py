"""Drift through the live gateway: an admitted version, then a shifted mix whose wrong answers a weak
verifier passes. Background teacher samples (a real Celery worker) label them; the drift check flags the
version within a stated number of calls, and the profile recovers by its safe fixed policy (the teacher,
whose answers are right), with no version routing meanwhile."""

from __future__ import annotations

import json

import httpx
import pytest

from bench.support.openai_stub import Reply
from routing.models import Invocation, RouterVersion
from routing.router.learning.features import hashing_spec
from routing.router.versions.drift import router_version_drift_check
from routing.router.versions.services import router_version_admit, router_version_train
from routing.router.versions.truth import fixed_choice
from tests.support.celery_worker import celery_worker
from tests.support.ledger import easy, fill, learned_profile
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BATCH = 10
FLAGGED_WITHIN = 20  # calls of the shifted mix


def shifted(body: dict[str, object]) -> Reply:
    """After the shift the student still answers in the schema, but with the wrong total."""
    student = "student" in str(body["model"])
    return Reply(content=json.dumps({"total": 7 if student else 42}))


def ask(gateway_url: str, key: str, text: str) -> tuple[str, str, str]:
    response = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json={"model": "auto", "messages": [{"role": "user", "content": text}]},
        headers={"Authorization": f"Bearer {key}", "X-Skillgate-Task": "totals"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    answer = response.json()["choices"][0]["message"]["content"]
    return response.headers["x-skillgate-route"], response.headers["x-skillgate-invocation"], answer


def test_a_shifted_mix_is_flagged_and_the_profile_recovers_by_its_safe_fallback(
    gateway_url, backends, api_key, stub, settings
):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "ROUTER": {**settings.SKILLGATE["ROUTER"], "DRIFT_MIN_CALLS": BATCH, "MIN_HELDOUT_CALLS": 15},
    }
    profile = learned_profile(teacher_sample_rate=1.0, student_sample_rate=0.0)
    fill(profile)  # in distribution: the student right on the easy calls, the hard ones fall back
    version = router_version_admit(
        version=router_version_train(profile=profile, spec=hashing_spec(ngram_dims=256))
    )
    assert version.status == RouterVersion.Status.ACTIVE, version.status_reason
    stub.responder = shifted

    pending = Invocation.SampleState.QUEUED, Invocation.SampleState.RUNNING
    flagged_after = None
    with celery_worker("drift-gateway", loglevel="WARNING") as worker:
        for sent in range(BATCH, FLAGGED_WITHIN + 1, BATCH):
            for i in range(sent - BATCH, sent):
                route, _, answer = ask(gateway_url, api_key.raw, easy(5000 + i))
                assert route == "student" and json.loads(answer) == {"total": 7}  # wrong, and served
            done = lambda: not Invocation.objects.filter(sample_state__in=pending).exists()  # noqa: E731
            worker.wait_until("the teacher samples", done, 120)
            version = router_version_drift_check(version=version)
            if version.drift_flag:
                flagged_after = sent
                break

    assert flagged_after is not None and flagged_after <= FLAGGED_WITHIN, version.drift_reason
    # Every answer passed its (weak) verifier: a check on verdicts reads 1.00; the samples' labels do not.
    live = Invocation.objects.filter(router_version=version)
    assert live.count() == flagged_after and all(row.verdict == "pass" for row in live)
    assert "correctness 0.000" in version.drift_reason and "SPRT" in version.drift_reason

    # Recovery: the flagged version no longer routes (once this server's lookup cache expires); the
    # profile's measured fixed policy does, and the cascade's measured quality now misses the target, so
    # the teacher serves: right answers again.
    assert RouterVersion.objects.get(pk=version.pk).drift_flag

    def served_by_the_teacher() -> bool:
        route, invocation_id, _ = ask(gateway_url, api_key.raw, easy(9000))
        row = Invocation.objects.get(pk=invocation_id)
        assert route == "teacher", (row.policy, row.router_version_id, fixed_choice(profile))
        return True

    ttl = settings.SKILLGATE["LOOKUP_CACHE_TTL_S"]
    wait_until(served_by_the_teacher, timeout=ttl + 10, interval=0.5, what="the safe fallback")
    for i in range(5):
        route, invocation_id, answer = ask(gateway_url, api_key.raw, easy(9100 + i))
        assert (route, json.loads(answer)) == ("teacher", {"total": 42})
        row = Invocation.objects.get(pk=invocation_id)
        assert row.router_version_id is None and row.policy == "always_teacher"
    choice = fixed_choice(profile)
    assert choice.quality is not None and choice.required is not None and choice.quality < choice.required
