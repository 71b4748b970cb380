"""Demonstrations, SkillBooks, admissions and the learning cycle."""

__all__: list[str] = []
