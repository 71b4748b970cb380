"""Distilled advice enters a SkillBook only where it agrees with the verified exemplars it came from."""

from __future__ import annotations

import pytest

from tests.support.cycle import CITIES, city_prompt, drive, json_profile, responder
from tests.training.test_skillbook import BAD, distilling
from training.models import Skill
from training.services.cycle import demonstrations_replay, skillbook_update
from training.services.cycle.grounding import ground, terms

EXEMPLARS = [
    {"prompt": "Paris is the capital of France.", "answer": '{"city": "Paris", "country": "France"}'},
    {"prompt": "Rome is the capital of Italy.", "answer": '{"city": "Rome", "country": "Italy"}'},
]


def test_terms_are_names_numbers_and_quoted_strings_not_placeholders_or_sentence_starts():
    assert terms("Currently the city of Monaco is the capital of France") == {"monaco", "france"}
    assert terms('Answer with one JSON object: {"city": "<city>", "country": "<country>"}.') == {
        "city",
        "country",
    }
    assert terms("Do not write text. Keep 2 keys.") == {"2"}


def test_a_pattern_naming_what_no_exemplar_has_and_a_pitfall_forbidding_a_verified_answer_are_rejected():
    result = ground(
        ["Currently the city of Monaco is the capital of France", 'Use the keys "city" and "country".'],
        [
            "The capital of France is Paris",
            "Never write text around the JSON object.",
            "Avoid Paris for Italy.",
        ],
        EXEMPLARS,
    )
    assert result.patterns == ['Use the keys "city" and "country".']
    assert result.pitfalls == ["Never write text around the JSON object.", "Avoid Paris for Italy."]
    assert [(r["kind"], r["text"]) for r in result.rejected] == [
        ("pattern", "Currently the city of Monaco is the capital of France"),
        ("pitfall", "The capital of France is Paris"),
    ]
    assert "monaco" in result.rejected[0]["why"] and "exemplar 1" in result.rejected[1]["why"]


def test_a_term_matches_whole_words_only():
    result = ground(["Write Nice as the city."], [], [{"prompt": "answer nicely", "answer": "{}"}])
    assert result.patterns == [] and result.rejected[0]["kind"] == "pattern"


@pytest.mark.django_db(transaction=True)
def test_a_weak_teachers_falsehoods_never_reach_the_skillbook(gateway_url, backends, api_key, stub):
    falsehoods = {
        "patterns": ["Currently the city of Monaco is the capital of France.", "Copy the city as written."],
        "pitfalls": ["The capital of France is Paris.", "Never leave out the country key."],
    }
    profile = json_profile()
    stub.responder = responder(student=BAD, teacher=distilling(falsehoods))
    drive(gateway_url, api_key.raw, "extract", [city_prompt(*c) for c in CITIES[:4]])
    demonstrations_replay(profile_id=profile.pk)

    update = skillbook_update(profile_id=profile.pk)

    assert update.skillbook is not None, update.error
    text = update.skillbook.text
    assert "Do: Copy the city as written." in text and "Avoid: Never leave out the country key." in text
    assert "Monaco" not in text and "Avoid: The capital of France is Paris" not in text
    assert {r["kind"] for r in update.rejected} == {"pattern", "pitfall"}
    skill = Skill.objects.get(profile=profile)
    assert skill.patterns == ["Copy the city as written."] and skill.pitfalls == [
        "Never leave out the country key."
    ]
