"""Admission: a held-out replay of the candidate against the active configuration through the real
backends (stubbed at the HTTP edge), paired exact McNemar, and the decision applied or not."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from django.conf import settings
from django.test import override_settings

from tests.factories import DemonstrationFactory, SkillBookFactory
from tests.support.cycle import CITIES, city_of, city_prompt, drive, good, is_student, json_profile, responder
from training.models import Admission
from training.services.cycle import Configuration, admission_apply, admission_evaluate
from training.services.cycle.admission import heldout_items, mcnemar
from training.services.cycle.calls import split_of

pytestmark = pytest.mark.django_db(transaction=True)

BAD = '{"city": "somewhere"}'
BOOK = "SkillBook for extract tasks (learned from verified answers):\n- Avoid: leaving out the country."


@contextmanager
def cycle_settings(**values):
    with override_settings(
        SKILLGATE={**settings.SKILLGATE, "CYCLE": {**settings.SKILLGATE["CYCLE"], **values}}
    ):
        yield


def has_book(body) -> bool:
    return any(m["role"] == "system" and m["content"].startswith("SkillBook for") for m in body["messages"])


def heldout_traffic(gateway_url, key, stub, n=10):
    """n calls, all held out (one shard), through the real gateway; every answer good while driving."""
    stub.responder = responder(student=lambda b: good(*city_of(b)), teacher=lambda b: good(*city_of(b)))
    return drive(gateway_url, key, "extract", [city_prompt(*c) for c in CITIES[:n]])


def evaluate(profile, *, kind="skillbook", candidate=None, active=None):
    book = SkillBookFactory.create(profile=profile, version=1, text=BOOK)
    return admission_evaluate(
        profile_id=profile.pk,
        kind=kind,
        candidate=candidate or Configuration(adapter="", skillbook_text=BOOK),
        active=active or Configuration(adapter="", skillbook_text=""),
        candidate_ids={"skillbook": book.pk},
        active_ids={"skillbook": None},
    )


@cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10)
def test_a_skillbook_that_fixes_the_student_is_admitted_and_becomes_the_gateways(
    gateway_url, backends, api_key, stub
):
    profile = json_profile()
    heldout_traffic(gateway_url, api_key.raw, stub)
    stub.responder = responder(
        student=lambda b: good(*city_of(b)) if has_book(b) else BAD, teacher=lambda b: good(*city_of(b))
    )

    admission = evaluate(profile)

    assert admission.decision == Admission.Decision.ADMITTED, admission.reason
    assert admission.active_metrics["n"] == admission.candidate_metrics["n"] == 10
    assert admission.active_metrics["pass_rate"] == admission.candidate_metrics["pass_rate"] == 1.0
    assert (
        admission.active_metrics["fallback_rate"] == 1.0
        and admission.candidate_metrics["fallback_rate"] == 0.0
    )
    assert admission.candidate_metrics["student_pass_rate"] == 1.0
    assert admission.candidate_metrics["cost_usd"] < admission.active_metrics["cost_usd"]
    assert (admission.mcnemar_b, admission.mcnemar_c, admission.p_value) == (0, 0, 1.0)
    assert "fallback rate 1.000 -> 0.000" in admission.reason
    profile.refresh_from_db()
    assert profile.skillbook_text == ""  # deciding is not applying

    admission_apply(admission=admission)

    profile.refresh_from_db()
    assert profile.skillbook_text == BOOK


@cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10)
def test_a_candidate_that_loses_quality_is_refused_by_mcnemar(gateway_url, backends, api_key, stub):
    profile = json_profile()
    heldout_traffic(gateway_url, api_key.raw, stub)
    # The active student is right; the candidate's SkillBook breaks it and the teacher cannot rescue.
    stub.responder = responder(student=lambda b: BAD if has_book(b) else good(*city_of(b)), teacher=BAD)

    admission = evaluate(profile)

    assert admission.decision == Admission.Decision.REFUSED
    assert (admission.mcnemar_b, admission.mcnemar_c) == (10, 0)
    assert admission.p_value == pytest.approx(2 * 0.5**10)
    assert admission.reason.startswith("pass rate worse: 0.000 vs 1.000")
    admission_apply(admission=admission)
    profile.refresh_from_db()
    assert profile.skillbook_text == ""


@cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10)
def test_same_quality_at_a_higher_cost_is_refused(gateway_url, backends, api_key, stub):
    profile = json_profile()
    heldout_traffic(gateway_url, api_key.raw, stub)
    # The candidate's student fails and the teacher rescues it: same pass rate, more fallbacks.
    stub.responder = responder(
        student=lambda b: BAD if has_book(b) else good(*city_of(b)), teacher=lambda b: good(*city_of(b))
    )

    admission = evaluate(profile)

    assert admission.decision == Admission.Decision.REFUSED
    assert (
        admission.candidate_metrics["pass_rate"] == 1.0
        and admission.candidate_metrics["fallback_rate"] == 1.0
    )
    assert admission.reason.startswith("neither cost")


def _split_responder():
    """Items 0-7: only the SkillBook makes the student right, the teacher is right. Items 8-9: the
    SkillBook breaks the student and the teacher is wrong. Active: 10/10; candidate: 8/10, b=2, c=0."""
    hard = {c for c, _ in CITIES[8:10]}

    def student(body):
        city, country = city_of(body)
        return good(city, country) if has_book(body) != (city in hard) else BAD

    def teacher(body):
        city, country = city_of(body)
        return BAD if city in hard else good(city, country)

    return responder(student=student, teacher=teacher)


@pytest.mark.parametrize(("alpha", "significant"), [(0.05, False), (0.6, True)])
def test_a_cheaper_candidate_that_loses_more_items_than_it_gains_is_refused_at_any_level(
    gateway_url, backends, api_key, stub, alpha, significant
):
    """b=2, c=0 is not significant at 0.05 (p=0.5), and is refused all the same: b > c."""
    profile = json_profile()
    with cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10, ADMISSION_ALPHA=alpha):
        heldout_traffic(gateway_url, api_key.raw, stub)
        stub.responder = _split_responder()
        admission = evaluate(profile)

    assert (admission.mcnemar_b, admission.mcnemar_c, admission.p_value) == (2, 0, 0.5)
    assert admission.active_metrics["pass_rate"] == 1.0 and admission.candidate_metrics["pass_rate"] == 0.8
    assert admission.candidate_metrics["cost_usd"] < admission.active_metrics["cost_usd"]
    assert admission.decision == Admission.Decision.REFUSED and admission.alpha == alpha
    assert "loses 2 held-out items and gains 0" in admission.reason
    assert ("significant" in admission.reason) == significant


@cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10)
def test_an_adapter_candidate_is_replayed_under_its_own_model_name(gateway_url, backends, api_key, stub):
    profile = json_profile()
    heldout_traffic(gateway_url, api_key.raw, stub)
    stub.responder = responder(
        student=lambda b: good(*city_of(b)) if b["model"] == "student-lora-2" else BAD,
        teacher=lambda b: good(*city_of(b)),
    )
    seen = len(stub.requests)

    admission = evaluate(
        profile, kind="adapter", candidate=Configuration(adapter="student-lora-2", skillbook_text="")
    )

    assert admission.decision == Admission.Decision.ADMITTED
    models = [b["model"] for b in stub.requests[seen:] if is_student(b)]
    assert models.count("student-lora-2") == 10 and models.count("student-model") == 10
    # The teacher answered each item once (shared by both sides), only where a student failed.
    assert sum(1 for b in stub.requests[seen:] if not is_student(b)) == 10
    assert all(b["temperature"] == 0 for b in stub.requests[seen:])


@cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10)
def test_too_few_heldout_items_are_refused(gateway_url, backends, api_key, stub):
    profile = json_profile()
    heldout_traffic(gateway_url, api_key.raw, stub, n=3)
    stub.responder = responder(student=lambda b: good(*city_of(b)) if has_book(b) else BAD, teacher=BAD)

    admission = evaluate(profile)

    assert admission.decision == Admission.Decision.REFUSED
    assert admission.reason == "only 3 held-out items; admission needs 10"


def test_the_heldout_set_is_the_heldout_shard_only_and_distinct(gateway_url, backends, api_key, stub):
    profile = json_profile()
    calls = heldout_traffic(gateway_url, api_key.raw, stub, n=12)
    expected = {c.pk for c in calls if split_of(c.request["messages"]) == "heldout"}
    assert 0 < len(expected) < 12  # one shard in five
    # A held-out demonstration of a prompt already in the ledger is the same item.
    call = next(c for c in calls if c.pk in expected)
    DemonstrationFactory.create(
        profile=profile,
        invocation=call,
        messages=call.request["messages"],
        request=call.request,
        completion="{}",
        split="heldout",
    )

    items = heldout_items(profile=profile, limit=100)

    assert len(items) == len(expected)
    assert {tuple(map(str, i.request["messages"])) for i in items} == {
        tuple(map(str, c.request["messages"])) for c in calls if c.pk in expected
    }


def test_mcnemar_counts_discordant_pairs_and_gives_the_exact_p_value():
    assert mcnemar([True] * 5, [True] * 5) == (0, 0, 1.0)
    b, c, p = mcnemar([True, True, True, False, True, True], [False, False, False, True, True, False])
    assert (b, c) == (4, 1) and p == pytest.approx(0.375)


def test_a_candidate_that_passes_more_items_at_the_same_cost_and_fallbacks_is_admitted():
    """Labelled answers: a wrong answer the weak verifier passes is served (no fallback), so neither cost
    nor fallback rate can show a more correct student; passing more held-out items (c > b) does."""
    from decimal import Decimal

    from training.services.cycle.admission import SideMetrics, decide

    active = SideMetrics(n=11, passed=5, student_passed=5, cost=Decimal("0.011"))
    candidate = SideMetrics(n=11, passed=7, student_passed=7, cost=Decimal("0.011"))

    decision, reason = decide(active, candidate, b=0, c=2, p=0.5, alpha=0.05, min_items=8)
    assert decision == Admission.Decision.ADMITTED
    assert "pass rate 0.455 -> 0.636" in reason

    same = SideMetrics(n=11, passed=5, student_passed=5, cost=Decimal("0.011"))
    decision, reason = decide(active, same, b=1, c=1, p=1.0, alpha=0.05, min_items=8)
    assert decision == Admission.Decision.REFUSED
    assert reason.startswith("neither cost")
