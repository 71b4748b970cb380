"""The cycle API over HTTP against the running server: token auth, start, list, detail, runs, admissions.

The key is an operator's with the learning scopes (tests/security/test_scopes.py checks the others)."""

from __future__ import annotations

import httpx
import pytest

from routing import scopes
from tests.factories import AdmissionFactory, KeyPair, make_role_key
from tests.support.cycle import json_profile
from training.models import Cycle
from training.services.adapters import training_run_start

pytestmark = pytest.mark.django_db(transaction=True)

# The first request imports every URL module of the server: give it time on a busy machine.
http = httpx.Client(timeout=60)


@pytest.fixture
def learning_key(transactional_db: None) -> KeyPair:
    """An operator's key that may read and start learning cycles."""
    return make_role_key("operator", "operator", scopes=[scopes.LEARNING_READ, scopes.LEARNING_WRITE])


def test_the_cycle_api_needs_a_key(gateway_url, backends):
    json_profile()
    assert http.get(f"{gateway_url}/api/cycles").status_code == 401
    refused = http.post(
        f"{gateway_url}/api/cycles", json={"profile": "extract"}, headers={"Authorization": "Bearer sg-nope"}
    )
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert not Cycle.objects.exists()


def test_an_llm_key_cannot_start_or_read_cycles(gateway_url, backends, api_key, learning_key):
    json_profile()
    auth = {"Authorization": f"Bearer {api_key.raw}"}
    refused = http.post(f"{gateway_url}/api/cycles", json={"profile": "extract"}, headers=auth)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "missing_scope"
    assert http.get(f"{gateway_url}/api/cycles", headers=auth).json()["error"]["code"] == "missing_scope"
    assert not Cycle.objects.exists()
    ok = http.get(f"{gateway_url}/api/cycles", headers={"Authorization": f"Bearer {learning_key.raw}"})
    assert ok.status_code == 200  # the service keeps serving


def test_start_twice_then_list_and_read_a_cycle(gateway_url, backends, learning_key):
    profile = json_profile()
    auth = {"Authorization": f"Bearer {learning_key.raw}"}

    first = http.post(f"{gateway_url}/api/cycles", json={"profile": "extract"}, headers=auth)
    second = http.post(f"{gateway_url}/api/cycles", json={"profile": "extract"}, headers=auth)

    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["created"] is True and second.json()["created"] is False
    cycle = first.json()["cycle"]
    assert second.json()["cycle"]["id"] == cycle["id"]
    assert (cycle["profile"], cycle["trigger"], cycle["stage"]) == ("extract", "api", "replay")
    listed = http.get(f"{gateway_url}/api/cycles", params={"profile": "extract"}, headers=auth).json()
    assert [c["id"] for c in listed["cycles"]] == [cycle["id"]]
    detail = http.get(f"{gateway_url}{cycle['url']}", headers=auth)
    assert detail.status_code == 200 and detail.json()["cycle"]["profile"] == profile.name
    assert http.get(f"{gateway_url}/api/cycles/999999", headers=auth).status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [({"profile": "nope"}, 404, "not_found"), ({}, 400, "invalid_field"), ([1], 400, "invalid_json")],
)
def test_a_bad_start_is_refused_at_the_edge(gateway_url, backends, learning_key, body, status, code):
    json_profile()
    answer = http.post(
        f"{gateway_url}/api/cycles", json=body, headers={"Authorization": f"Bearer {learning_key.raw}"}
    )
    assert answer.status_code == status and answer.json()["error"]["code"] == code


def test_training_runs_and_admissions_are_listed_per_profile(gateway_url, backends, learning_key):
    profile = json_profile()
    other = json_profile(name="other")
    auth = {"Authorization": f"Bearer {learning_key.raw}"}
    run = training_run_start(
        profile_id=profile.pk, examples=[_example()], enqueue=False, hyperparameters={"sft_steps": 3}
    )
    AdmissionFactory.create(
        profile=profile,
        candidate={"skillbook": 1},
        decision="refused",
        reason="too few",
        mcnemar_b=2,
        mcnemar_c=1,
        p_value=1.0,
    )
    AdmissionFactory.create(profile=other, kind="adapter")

    runs = http.get(f"{gateway_url}/api/training-runs", params={"profile": "extract"}, headers=auth).json()
    admissions = http.get(f"{gateway_url}/api/admissions", params={"profile": "extract"}, headers=auth).json()
    everything = http.get(f"{gateway_url}/api/admissions", headers=auth).json()

    [listed] = runs["training_runs"]
    assert listed["id"] == run.pk and listed["adapter"]["name"] == run.adapter.name
    assert (listed["status"], listed["total_steps"], listed["profile"]) == ("queued", 3, "extract")
    [admission] = admissions["admissions"]
    assert admission["mcnemar"] == {"b": 2, "c": 1, "p_value": 1.0} and admission["decision"] == "refused"
    assert len(everything["admissions"]) == 2


def _example():
    from training.trainer.datasets import Example

    return Example(messages=[{"role": "user", "content": "hi"}], completion="hello")
