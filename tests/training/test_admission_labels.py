"""Admission on labels: where a profile labels live answers with background teacher samples, admission
labels its held-out answers the same way, so a weak verifier's false passes cannot buy an admission."""

from __future__ import annotations

import json

import pytest

from tests.support.cycle import city_of, good, has_book, is_student, json_profile, responder
from tests.training.test_admission import BAD, cycle_settings, evaluate, heldout_traffic
from training.models import Admission

pytestmark = pytest.mark.django_db(transaction=True)


def wrong_with_book(body):
    """Without the SkillBook the student fails the schema (the teacher answers); with it, the schema
    passes but the city is wrong: the weak verifier's regime."""
    if has_book(body):
        return json.dumps({"city": "Atlantis", "country": city_of(body)[1]})
    return BAD


@pytest.mark.parametrize("rate", [0.0, 0.5])
@cycle_settings(HELDOUT_SHARDS=1, ADMISSION_MIN_ITEMS=10)
def test_a_candidate_whose_passes_the_teacher_shows_wrong_is_refused(
    gateway_url, backends, api_key, stub, rate
):
    profile = json_profile(policy_params={"teacher_sample_rate": rate})
    heldout_traffic(gateway_url, api_key.raw, stub)
    stub.responder = responder(student=wrong_with_book, teacher=lambda body: good(*city_of(body)))
    teacher_before = sum(not is_student(b) for b in stub.requests)

    admission = evaluate(profile)

    teacher_calls = sum(not is_student(b) for b in stub.requests) - teacher_before
    assert teacher_calls == 10  # asked once per item either way (the active side fails every one)
    candidate = admission.candidate_metrics
    if rate == 0:  # judged by the verifier alone: ten fallbacks saved, admitted
        assert candidate["labelled"] is False and candidate["student_wrong"] == 0
        assert (admission.mcnemar_b, admission.mcnemar_c) == (0, 0)
        assert admission.decision == Admission.Decision.ADMITTED, admission.reason
    else:  # labelled: every candidate answer is wrong, and the active side's fallbacks were right
        assert candidate["labelled"] is True and candidate["student_wrong"] == 10
        assert candidate["student_pass_rate"] == 0.0 and candidate["pass_rate"] == 0.0
        assert candidate["fallback_rate"] == 0.0  # live, the verifier would have served them
        assert (admission.mcnemar_b, admission.mcnemar_c) == (10, 0)
        assert admission.decision == Admission.Decision.REFUSED
        assert admission.reason.startswith("pass rate worse: 0.000 vs 1.000")
        assert all(item["candidate"]["wrong"] for item in admission.items)
