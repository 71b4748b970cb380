"""A cycle's SkillBook and the Evolver's skills share a profile's text; neither erases the other."""

from __future__ import annotations

import pytest

from diagnostics.agent.investigation.skills import HEADER
from routing.models import TaskProfile
from tests.factories import SkillBookFactory, TaskProfileFactory
from training.services.cycle.skillbook import skillbook_activate

pytestmark = pytest.mark.django_db

SKILLS = f"{HEADER}\n\n### skill s1 | alert=KubePodCrashLooping | went wrong=stopped_early\nfix: roll back"


def test_activating_a_skillbook_keeps_the_admitted_diagnostic_skills() -> None:
    profile = TaskProfileFactory.create(name="sre-observer", skillbook_text=f"Old patterns.\n\n{SKILLS}")
    book = SkillBookFactory.create(profile=profile, version=2, text="Pattern: answer in JSON.")

    skillbook_activate(skillbook_id=book.pk)

    text = TaskProfile.objects.get(pk=profile.pk).skillbook_text
    assert text.startswith("Pattern: answer in JSON.")
    assert "Old patterns." not in text
    assert text.endswith(SKILLS)


def test_activating_a_skillbook_on_a_profile_without_skills_sets_just_its_text() -> None:
    profile = TaskProfileFactory.create(name="extract", skillbook_text="Old patterns.")
    book = SkillBookFactory.create(profile=profile, version=2, text="Pattern: answer in JSON.")

    skillbook_activate(skillbook_id=book.pk)

    assert TaskProfile.objects.get(pk=profile.pk).skillbook_text == "Pattern: answer in JSON."
