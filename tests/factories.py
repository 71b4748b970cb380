from __future__ import annotations

from decimal import Decimal

import factory
from django.utils import timezone

from routing.keys import generate_key
from routing.models import ApiKey, Backend, Invocation, TaskProfile


class ApiKeyFactory(factory.django.DjangoModelFactory):
    """``ApiKeyFactory().raw`` is the usable secret of the created key."""

    class Meta:
        model = ApiKey

    name = factory.Sequence(lambda n: f"key-{n}")

    @classmethod
    def _create(cls, model_class: type[ApiKey], *args: object, **kwargs: object) -> ApiKey:
        raw, prefix, digest = generate_key()
        key = super()._create(model_class, *args, prefix=prefix, key_hash=digest, **kwargs)
        key.raw = raw  # type: ignore[attr-defined]
        return key


class BackendFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Backend
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"backend-{n}")
    role = Backend.Role.TEACHER
    model = "openai/stub-model"
    api_base = ""
    input_cost_per_token = Decimal("0.000002")
    output_cost_per_token = Decimal("0.000008")


class TaskProfileFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TaskProfile
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"profile-{n}")
    policy = TaskProfile.Policy.STUDENT_WITH_FALLBACK
    verifier = factory.LazyFunction(dict)


class InvocationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Invocation

    api_key = factory.SubFactory(ApiKeyFactory)
    profile = factory.SubFactory(TaskProfileFactory)
    created_at = factory.LazyFunction(timezone.now)
    requested_model = "auto"
    route = Invocation.Route.STUDENT
    served_by = Invocation.Route.STUDENT
    policy = TaskProfile.Policy.STUDENT_WITH_FALLBACK
    verdict = Invocation.Verdict.PASS
    request = factory.LazyFunction(lambda: {"messages": [{"role": "user", "content": "hi"}]})
