"""Learning spend in the books: the cycle's upstream calls and the background samples are ledger rows
under the learning key, charged to its own budget, which stops them when spent; the client's key pays
nothing for them."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from bench.support.openai_stub import Reply
from routing.budgets import to_cents
from routing.call.plans import plan_call
from routing.call.sampling import sample_run
from routing.ledger.learning_spend import DEFAULT_BUDGET_USD, LEARNING_KEY_NAME, POLICY, learning_key
from routing.models import ApiKey, Invocation, SampleSpend, TaskProfile
from routing.pricing import attempt_bound, prices_for
from tests.factories import InvocationFactory
from tests.support.cycle import CITIES, city_of, city_prompt, drive, good, is_student, json_profile, responder
from training.models import ReplayAttempt
from training.services.cycle import demonstrations_replay
from training.services.cycle.calls import CycleError

pytestmark = pytest.mark.django_db(transaction=True)

BAD = '{"city": "somewhere"}'  # no country: fails the schema


def learning_rows(purpose: str):
    return Invocation.objects.filter(policy=POLICY, requested_model=f"learning:{purpose}")


def test_replay_calls_are_ledger_rows_under_the_learning_key(gateway_url, backends, api_key, stub):
    profile = json_profile()
    stub.responder = responder(student=BAD, teacher='{"country": "France"}')  # the fallback fails too
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES[:2]])
    stub.responder = responder(student=BAD, teacher=lambda body: good(*city_of(body)))
    client_spent = ApiKey.objects.get(pk=api_key.key.pk).spent_usd

    demonstrations_replay(profile_id=profile.pk)

    key = ApiKey.objects.get(name=LEARNING_KEY_NAME)
    rows = list(learning_rows("replay")) + list(learning_rows("self_repair"))
    assert sorted(r.route for r in rows) == ["student", "student", "teacher", "teacher"]
    assert all(r.api_key_id == key.pk and r.profile_id == profile.pk for r in rows)
    assert all(r.cost_usd > 0 and "messages" not in r.request and r.request["sha256"] for r in rows)
    assert key.spent_usd == sum(r.cost_usd for r in rows) and key.reserved_usd == 0
    assert key.budget_usd == DEFAULT_BUDGET_USD and key.scopes == []
    assert ApiKey.objects.get(pk=api_key.key.pk).spent_usd == client_spent  # the client pays nothing more
    assert learning_key().pk == key.pk and ApiKey.objects.filter(name=LEARNING_KEY_NAME).count() == 1


def test_a_spent_learning_budget_stops_the_cycle_before_any_upstream_call(
    gateway_url, backends, api_key, stub
):
    profile = json_profile()
    stub.responder = responder(student=BAD, teacher='{"country": "France"}')
    drive(gateway_url, api_key.raw, "extract", [city_prompt("Paris", "France")])
    ApiKey.objects.filter(pk=learning_key().pk).update(budget_usd=Decimal("0.000001"))
    before = len(stub.requests)

    with pytest.raises(CycleError, match="learning key's budget"):
        demonstrations_replay(profile_id=profile.pk)

    assert len(stub.requests) == before and not learning_rows("replay").exists()


def sampled_call(profile, key):
    return InvocationFactory.create(
        api_key=key.key,
        profile=profile,
        legs=[
            {"backend": "student", "role": "student", "model": "student", "cost_usd": "0", "verdict": "pass"}
        ],
        request={"model": "auto", "messages": city_prompt("Paris", "France")},
        response={"message": {"role": "assistant", "content": good("Paris", "France")}},
        sample_state=Invocation.SampleState.QUEUED,
    )


def test_a_background_sample_is_a_learning_row_of_its_own(backends, api_key, stub):
    profile = json_profile(policy_params={"teacher_sample_rate": 1.0})
    stub.responder = responder(student=BAD, teacher=lambda body: good(*city_of(body)))
    call = sampled_call(profile, api_key)

    assert sample_run(invocation_id=call.pk) == "done"

    [row] = learning_rows("sample")
    background = next(leg for leg in Invocation.objects.get(pk=call.pk).legs if leg.get("background"))
    assert row.route == "teacher" and row.cost_usd == Decimal(background["cost_usd"]) > 0
    assert Invocation.objects.get(pk=call.pk).cost_usd == 0  # the client's row is not charged
    assert ApiKey.objects.get(name=LEARNING_KEY_NAME).spent_usd == row.cost_usd


def test_a_spent_learning_budget_caps_the_sample_and_gives_the_day_back(backends, api_key, stub):
    profile = json_profile(policy_params={"teacher_sample_rate": 1.0})
    ApiKey.objects.filter(pk=learning_key().pk).update(budget_usd=Decimal(0))
    call = sampled_call(profile, api_key)

    assert sample_run(invocation_id=call.pk) == "capped"

    assert not stub.requests and not learning_rows("sample").exists()
    assert SampleSpend.objects.get(profile=profile).spent_usd == 0


def test_admission_replays_are_on_the_books(gateway_url, backends, api_key, stub):
    from tests.training.test_admission import cycle_settings, evaluate, heldout_traffic

    profile = json_profile()
    with cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10):
        heldout_traffic(gateway_url, api_key.raw, stub)
        stub.responder = responder(student=BAD, teacher=lambda body: good(*city_of(body)))
        evaluate(profile)

    rows = {r.route: r for r in learning_rows("admission")}
    student_calls = sum(1 for b in stub.requests[-30:] if is_student(b))
    assert set(rows) == {"student", "teacher"} and student_calls
    assert rows["student"].cost_usd > 0 and rows["teacher"].cost_usd > 0
    key = ApiKey.objects.get(name=LEARNING_KEY_NAME)
    assert key.spent_usd == rows["student"].cost_usd + rows["teacher"].cost_usd and key.reserved_usd == 0
    assert json.loads(json.dumps(rows["teacher"].request))["message_count"] == 10


# -- failed and retried attempts (issue 37): billed like the gateway's, retries within the learning cap --


def _one_attempt(profile, call, role: str = "teacher") -> Decimal:
    """The worst case of one attempt of the sampled leg, as the gateway bounds it (run_leg's)."""
    plan = plan_call(profile=profile, request=call.request, api_key=call.api_key)
    backend = plan.teacher if role == "teacher" else plan.student
    return attempt_bound(prices_for(backend), plan.leg_body(backend), max_tokens=plan.max_tokens)


def test_a_sample_whose_teacher_fails_is_charged_every_attempt_it_sent(backends, api_key, stub):
    profile = json_profile(policy_params={"teacher_sample_rate": 1.0})
    stub.responder = responder(student=BAD, teacher=Reply(status=500))
    call = sampled_call(profile, api_key)

    sample_run(invocation_id=call.pk)

    assert len(stub.requests) == 3  # the first attempt and two retries, each one billed
    [row] = learning_rows("sample")
    assert row.cost_usd == to_cents(3 * _one_attempt(profile, call)) > 0
    key = ApiKey.objects.get(name=LEARNING_KEY_NAME)
    assert key.spent_usd == row.cost_usd and key.reserved_usd == 0
    assert SampleSpend.objects.get(profile=profile).spent_usd == row.cost_usd


@pytest.mark.parametrize("limit", ["learning key", "daily cap"])
def test_a_samples_retries_count_against_the_learning_cap(backends, api_key, stub, limit):
    """Room for one attempt and a half: the retry is not sent, and nothing is spent past the cap."""
    profile = json_profile(policy_params={"teacher_sample_rate": 1.0})
    stub.responder = responder(student=BAD, teacher=Reply(status=500))
    call = sampled_call(profile, api_key)
    room = _one_attempt(profile, call) * Decimal("1.5")
    if limit == "learning key":
        ApiKey.objects.filter(pk=learning_key().pk).update(budget_usd=to_cents(room))
    else:
        TaskProfile.objects.filter(pk=profile.pk).update(
            policy_params={"teacher_sample_rate": 1.0, "sample_daily_usd": float(room)}
        )

    sample_run(invocation_id=call.pk)

    assert len(stub.requests) == 1  # no hold for a second billed attempt: not sent
    [row] = learning_rows("sample")
    key = ApiKey.objects.get(name=LEARNING_KEY_NAME)
    assert key.spent_usd == row.cost_usd > 0 and key.reserved_usd == 0
    assert key.spent_usd <= key.budget_usd
    assert SampleSpend.objects.get(profile=profile).spent_usd <= room


def test_a_replay_whose_teacher_fails_is_charged_and_retried_only_within_the_learning_budget(
    gateway_url, backends, api_key, stub
):
    profile = json_profile()
    stub.responder = responder(student=BAD, teacher='{"country": "France"}')
    drive(gateway_url, api_key.raw, "extract", [city_prompt("Paris", "France")])
    stub.responder = responder(student=BAD, teacher=Reply(status=500))
    before = len(stub.requests)

    assert demonstrations_replay(profile_id=profile.pk).errors >= 1

    [row] = learning_rows("replay")
    sent = len([b for b in stub.requests[before:] if not is_student(b)])
    assert sent == 3 and row.error and row.cost_usd > 0  # every billed attempt, though none answered
    one = row.cost_usd / 3
    key = ApiKey.objects.get(name=LEARNING_KEY_NAME)
    assert key.spent_usd >= row.cost_usd and key.reserved_usd == 0

    # A learning budget with room for one attempt and a half: the retry is not sent.
    Invocation.objects.filter(policy=POLICY).delete()
    ReplayAttempt.objects.all().delete()
    ApiKey.objects.filter(pk=key.pk).update(budget_usd=key.spent_usd + to_cents(one * Decimal("1.5")))
    before = len(stub.requests)
    demonstrations_replay(profile_id=profile.pk)
    assert len([b for b in stub.requests[before:] if not is_student(b)]) == 1
    key.refresh_from_db()
    assert key.spent_usd <= key.budget_usd and key.reserved_usd == 0


def test_admission_replays_charge_the_attempts_of_a_failing_teacher(gateway_url, backends, api_key, stub):
    from tests.training.test_admission import cycle_settings, evaluate, heldout_traffic

    profile = json_profile()
    with cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=3, ADMISSION_MAX_ITEMS=3):
        heldout_traffic(gateway_url, api_key.raw, stub, n=3)
        stub.responder = responder(student=BAD, teacher=Reply(status=500))
        before = len(stub.requests)
        evaluate(profile)

    teacher_sent = [b for b in stub.requests[before:] if not is_student(b)]
    assert len(teacher_sent) == 9  # three items, each its first attempt and two retries, none answered
    rows = {r.route: r for r in learning_rows("admission")}
    assert rows["teacher"].cost_usd > 0  # every attempt the provider may have billed
    key = ApiKey.objects.get(name=LEARNING_KEY_NAME)
    assert key.spent_usd == rows["student"].cost_usd + rows["teacher"].cost_usd and key.reserved_usd == 0
