"""SkillBook: stats, exemplars and failures per task signature, teacher-distilled advice, versions
with diffs, a size cap, the previous text kept when distillation fails, and the gateway's prepend."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.test import override_settings

from bench.support.openai_stub import Reply
from routing.models import TaskProfile
from tests.support.cycle import (
    CITIES,
    city_of,
    city_prompt,
    drive,
    good,
    is_student,
    json_profile,
    responder,
    system_text,
)
from training.models import Skill, SkillBook
from training.services.cycle import demonstrations_replay, skillbook_activate, skillbook_update
from training.services.cycle.calls import split_of
from training.services.cycle.skillbook import render

pytestmark = pytest.mark.django_db(transaction=True)

BAD = '{"city": "somewhere"}'
ADVICE = {
    "patterns": ["Copy the city and the country exactly as written."],
    "pitfalls": ["Never leave out the country key."],
}


def distilling(advice):
    """A teacher that answers city prompts and, asked to distill, the given advice (or a Reply)."""

    def teacher(body):
        if system_text(body).startswith("You maintain a SkillBook"):
            return advice if isinstance(advice, Reply) else json.dumps(advice)
        return good(*city_of(body))

    return teacher


def failing_traffic(gateway_url, key, stub, cities):
    stub.responder = responder(student=BAD, teacher=distilling(ADVICE))
    drive(gateway_url, key, "extract", [city_prompt(*c) for c in cities])


def new_version(profile) -> SkillBook:
    update = skillbook_update(profile_id=profile.pk)
    assert update.skillbook is not None, update.error
    return update.skillbook


def distill_requests(stub):
    return [b for b in stub.requests if not is_student(b) and system_text(b).startswith("You maintain")]


def test_an_update_distills_advice_into_a_new_version_with_a_diff(gateway_url, backends, api_key, stub):
    profile = json_profile()
    failing_traffic(gateway_url, api_key.raw, stub, CITIES[:3])
    demonstrations_replay(profile_id=profile.pk)

    update = skillbook_update(profile_id=profile.pk)

    assert update.changed and not update.error and update.skillbook is not None
    book = update.skillbook
    assert book.version == 1
    assert "Do: Copy the city and the country exactly as written." in book.text
    assert "Avoid: Never leave out the country key." in book.text
    assert (
        book.diff.startswith("--- v0\n+++ v1\n") and "+- Avoid: Never leave out the country key." in book.diff
    )
    skill = Skill.objects.get(profile=profile)
    assert skill.stats == {"openai/student-model": {"fail": 3}, "openai/teacher-model": {"pass": 3}}
    assert len(skill.exemplars) == 3 and json.loads(skill.exemplars[0]["answer"])["country"]
    assert len(skill.failures) == 3 and all("country" in f["problem"] for f in skill.failures)
    # The teacher saw the exemplars and the failures, and was asked for the JSON shape.
    [asked] = distill_requests(stub)
    material = json.loads(asked["messages"][1]["content"])
    assert len(material["good_answers"]) == 3 and len(material["failures"]) == 3
    assert asked["response_format"]["type"] == "json_schema"
    # Not admitted yet: the gateway's text is unchanged.
    profile.refresh_from_db()
    assert profile.skillbook_text == ""


def test_nothing_new_means_no_teacher_call_and_no_new_version(gateway_url, backends, api_key, stub):
    profile = json_profile()
    failing_traffic(gateway_url, api_key.raw, stub, CITIES[:2])
    demonstrations_replay(profile_id=profile.pk)
    skillbook_update(profile_id=profile.pk)

    again = skillbook_update(profile_id=profile.pk)

    assert not again.changed and not again.error
    assert len(distill_requests(stub)) == 1
    assert SkillBook.objects.count() == 1


def test_new_evidence_gives_a_new_version_whose_diff_shows_the_change(gateway_url, backends, api_key, stub):
    profile = json_profile()
    failing_traffic(gateway_url, api_key.raw, stub, CITIES[:2])
    demonstrations_replay(profile_id=profile.pk)
    skillbook_update(profile_id=profile.pk)
    failing_traffic(gateway_url, api_key.raw, stub, CITIES[2:4])
    demonstrations_replay(profile_id=profile.pk)
    newer = {"patterns": ADVICE["patterns"], "pitfalls": ["Always include the country, even if obvious."]}
    stub.responder = responder(student=BAD, teacher=distilling(newer))

    book = new_version(profile)

    assert book.version == 2
    assert "-- Avoid: Never leave out the country key." in book.diff
    assert "+- Avoid: Always include the country, even if obvious." in book.diff


@pytest.mark.parametrize(
    "answer",
    [
        "Sure! Here are some tips: always include the country.",  # not JSON
        json.dumps({"patterns": ["a"], "pitfalls": ["b", "c", "d", "e"]}),  # more than allowed
        Reply(status=500, error="teacher down"),
    ],
    ids=["prose", "too-many-items", "teacher-error"],
)
def test_a_failed_distillation_keeps_the_previous_text(gateway_url, backends, api_key, stub, answer):
    profile = json_profile()
    failing_traffic(gateway_url, api_key.raw, stub, CITIES[:2])
    demonstrations_replay(profile_id=profile.pk)
    first = new_version(profile)
    failing_traffic(gateway_url, api_key.raw, stub, CITIES[2:4])
    stub.responder = responder(student=BAD, teacher=distilling(answer))

    update = skillbook_update(profile_id=profile.pk)

    assert not update.changed and "distillation" in update.error
    assert list(SkillBook.objects.values_list("version", "text")) == [(1, first.text)]
    skill = Skill.objects.get(profile=profile)
    assert skill.pitfalls == ADVICE["pitfalls"] and len(skill.failures) == 2  # untouched


def test_the_text_stays_under_the_size_cap_in_whole_lines():
    profile = TaskProfile(name="extract")
    skills = [
        Skill(
            task_signature=f"sig{i}",
            label=f"kind {i}",
            patterns=[f"pattern {i}.{j} " + "x" * 120 for j in range(3)],
            pitfalls=[f"pitfall {i}.{j} " + "y" * 120 for j in range(3)],
            exemplars=[{"prompt": "p", "answer": "a" * 400}],
        )
        for i in range(5)
    ]
    text = render(profile, skills, max_chars=700)
    assert len(text) <= 700
    assert text.startswith("SkillBook for extract tasks") and "## kind 0" in text and "kind 4" not in text
    assert all(line.endswith(("x", "y", "…", ":")) or line.startswith("## ") for line in text.splitlines())
    full = render(profile, skills, max_chars=100_000)
    assert "## kind 4" in full and len(full) > 700


def test_an_activated_skillbook_is_put_in_front_of_the_students_prompt_only(
    gateway_url, backends, api_key, stub
):
    profile = json_profile()
    failing_traffic(gateway_url, api_key.raw, stub, CITIES[:2])
    demonstrations_replay(profile_id=profile.pk)
    book = new_version(profile)

    skillbook_activate(skillbook_id=book.pk)

    profile.refresh_from_db()
    assert profile.skillbook_text == book.text
    book.refresh_from_db()
    assert book.activated_at is not None
    seen = len(stub.requests)
    drive(gateway_url, api_key.raw, "extract", [city_prompt("Rome", "Italy")])
    student, teacher = stub.requests[seen:]
    assert system_text(student).startswith(book.text + "\n\n") and system_text(student).endswith(
        'country": ...}.'
    )
    assert book.text not in system_text(teacher)


def test_the_cap_comes_from_the_settings(gateway_url, backends, api_key, stub):
    profile = json_profile()
    failing_traffic(gateway_url, api_key.raw, stub, CITIES[:2])
    demonstrations_replay(profile_id=profile.pk)
    with override_settings(
        SKILLGATE={**settings.SKILLGATE, "CYCLE": {**settings.SKILLGATE["CYCLE"], "SKILLBOOK_MAX_CHARS": 200}}
    ):
        book = new_version(profile)
    assert len(book.text) <= 200 and "Do:" in book.text and "Avoid:" not in book.text


def test_heldout_prompts_never_reach_the_skillbook(gateway_url, backends, api_key, stub):
    profile = json_profile()
    heldout, train = ("Hanoi", "Vietnam"), ("Paris", "France")
    assert split_of(city_prompt(*heldout)) == "heldout" and split_of(city_prompt(*train)) == "train"
    failing_traffic(gateway_url, api_key.raw, stub, [heldout, train])
    demonstrations_replay(profile_id=profile.pk)

    book = new_version(profile)

    skill = Skill.objects.get(profile=profile)
    assert [f["prompt"] for f in skill.failures] == [city_prompt(*train)[1]["content"]]
    assert [json.loads(e["answer"])["city"] for e in skill.exemplars] == ["Paris"]
    [asked] = distill_requests(stub)
    assert "Hanoi" not in asked["messages"][1]["content"] and "Hanoi" not in book.text
