"""Training settings, adapters, runs, demonstrations, SkillBooks, admissions, cycles, diagnostic skills."""

from __future__ import annotations

from typing import Any

import factory

from routing.models import (
    Invocation,
)
from tests.factories.diagnostics import TrajectoryFactory
from tests.factories.routing import InvocationFactory, TaskProfileFactory
from training.models import (
    Adapter,
    Admission,
    Cycle,
    Demonstration,
    DiagnosticSkill,
    DiagnosticSkillSet,
    ReplayAttempt,
    Rollback,
    Skill,
    SkillBook,
    TrainingRun,
    TrainingSettings,
)


class TrainingSettingsFactory(factory.django.DjangoModelFactory[TrainingSettings]):
    class Meta:
        model = TrainingSettings

    profile = factory.SubFactory(TaskProfileFactory)


class AdapterFactory(factory.django.DjangoModelFactory[Adapter]):
    """A candidate adapter named ``<profile>-v<version>``, as training_run_start names it."""

    class Meta:
        model = Adapter

    profile = factory.SubFactory(TaskProfileFactory)
    version = factory.Sequence(lambda n: n + 1)
    name = factory.LazyAttribute(lambda o: f"{o.profile.name}-v{o.version}")
    path = factory.LazyAttribute(lambda o: f"/nonexistent/adapters/{o.name}")
    base_model = "/nonexistent/base-model"


class TrainingRunFactory(factory.django.DjangoModelFactory[TrainingRun]):
    class Meta:
        model = TrainingRun

    adapter = factory.SubFactory(AdapterFactory)


class DemonstrationFactory(factory.django.DjangoModelFactory[Demonstration]):
    class Meta:
        model = Demonstration

    profile = factory.SubFactory(TaskProfileFactory)
    messages = factory.LazyFunction(lambda: [{"role": "user", "content": "Paris is the capital of France."}])
    completion = '{"city": "Paris", "country": "France"}'
    source = Demonstration.Source.TEACHER


class ReplayAttemptFactory(factory.django.DjangoModelFactory[ReplayAttempt]):
    class Meta:
        model = ReplayAttempt

    invocation = factory.SubFactory(InvocationFactory, verdict=Invocation.Verdict.FAIL)
    profile = factory.SelfAttribute("invocation.profile")
    source = Demonstration.Source.TEACHER
    outcome = ReplayAttempt.Outcome.ACCEPTED


class SkillFactory(factory.django.DjangoModelFactory[Skill]):
    class Meta:
        model = Skill

    profile = factory.SubFactory(TaskProfileFactory)
    task_signature = factory.Sequence(lambda n: f"{n:064x}")


class SkillBookFactory(factory.django.DjangoModelFactory[SkillBook]):
    class Meta:
        model = SkillBook

    profile = factory.SubFactory(TaskProfileFactory)
    version = factory.Sequence(lambda n: n + 1)
    text = "Reply with JSON only."


class AdmissionFactory(factory.django.DjangoModelFactory[Admission]):
    class Meta:
        model = Admission

    profile = factory.SubFactory(TaskProfileFactory)
    kind = Admission.Kind.SKILLBOOK
    candidate = factory.LazyFunction(lambda: {"skillbook": None})
    active = factory.LazyFunction(lambda: {"skillbook": None})
    candidate_metrics = factory.LazyFunction(lambda: {"pass_rate": 0.9, "n": 10})
    active_metrics = factory.LazyFunction(lambda: {"pass_rate": 0.8, "n": 10})
    decision = Admission.Decision.ADMITTED
    reason = "quality not worse, cost lower"


class RollbackFactory(factory.django.DjangoModelFactory[Rollback]):
    """An admission taken back: live correctness 0.6 on 40 labelled calls against its 0.9 - 0.1."""

    class Meta:
        model = Rollback

    admission = factory.SubFactory(AdmissionFactory)
    profile = factory.SelfAttribute("admission.profile")
    figure = 0.9
    live = 0.6
    samples = 40
    margin = 0.1
    p_value = 0.001
    reason = "live correctness 0.600 on 40 labelled calls is below 0.900 - 0.10"


class CycleFactory(factory.django.DjangoModelFactory[Cycle]):
    """A queued cycle at its first stage (a profile holds one unfinished cycle at most)."""

    class Meta:
        model = Cycle

    profile = factory.SubFactory(TaskProfileFactory)


class DiagnosticSkillFactory(factory.django.DjangoModelFactory[DiagnosticSkill]):
    """A failed diagnosis waiting for the Evolver, for the Observer's profile."""

    class Meta:
        model = DiagnosticSkill

    trajectory = factory.SubFactory(TrajectoryFactory, success=False, graded=True)
    profile = factory.SubFactory(TaskProfileFactory, name="sre-observer")
    source = DiagnosticSkill.Source.GRADED


class DiagnosticSkillSetFactory(factory.django.DjangoModelFactory[DiagnosticSkillSet]):
    """A candidate set; ``skills=[...]`` adds skills to it."""

    class Meta:
        model = DiagnosticSkillSet
        skip_postgeneration_save = True

    profile = factory.SubFactory(TaskProfileFactory, name="sre-observer")
    version = factory.Sequence(lambda n: n + 1)
    text = "## Skills for similar incidents"

    @factory.post_generation
    def skills(self, create: bool, extracted: list[DiagnosticSkill] | None, **kwargs: Any) -> None:
        if create and extracted:
            self.skills.add(*extracted)
