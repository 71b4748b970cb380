from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import factory
from django.utils import timezone

from routing.keys import generate_key
from routing.models import ApiKey, Backend, Invocation, TaskProfile


class ApiKeyFactory(factory.django.DjangoModelFactory[ApiKey]):
    class Meta:
        model = ApiKey

    name = factory.Sequence(lambda n: f"key-{n}")
    prefix = factory.Sequence(lambda n: f"f{n:011d}")
    key_hash = "0" * 64  # matches no key; use make_key for a usable one


@dataclass
class KeyPair:
    """A stored key and its secret, which only exists at creation."""

    key: ApiKey
    raw: str

    @property
    def pk(self) -> int:
        return self.key.pk


def make_key(**fields: object) -> KeyPair:
    raw, prefix, digest = generate_key()
    return KeyPair(ApiKeyFactory.create(prefix=prefix, key_hash=digest, **fields), raw)


class BackendFactory(factory.django.DjangoModelFactory[Backend]):
    class Meta:
        model = Backend
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"backend-{n}")
    role = Backend.Role.TEACHER
    model = "openai/stub-model"
    api_base = ""
    input_cost_per_token = Decimal("0.000002")
    output_cost_per_token = Decimal("0.000008")


class TaskProfileFactory(factory.django.DjangoModelFactory[TaskProfile]):
    class Meta:
        model = TaskProfile
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"profile-{n}")
    policy = TaskProfile.Policy.STUDENT_WITH_FALLBACK
    verifier = factory.LazyFunction(dict)


class InvocationFactory(factory.django.DjangoModelFactory[Invocation]):
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


def make_role_key(username: str, *roles: str, scopes: list[str], **fields: object) -> KeyPair:
    """A key owned by a new user holding the dashboard ``roles`` (groups of app/web/roles.py)."""
    from django.contrib.auth.models import Group, User

    owner = User.objects.create(username=username)
    owner.groups.set([Group.objects.get(name=role) for role in roles])
    return make_key(name=username, owner=owner, scopes=scopes, **fields)


from diagnostics.models import Incident, Trajectory  # noqa: E402  (appended with its factories)


class IncidentFactory(factory.django.DjangoModelFactory[Incident]):
    """An incident (no trajectory: use diagnostics.services.incident_open for a queued diagnosis)."""

    class Meta:
        model = Incident

    title = factory.Sequence(lambda n: f"incident {n}")
    environment = "fake"
    status = Incident.Status.DIAGNOSED


class TrajectoryFactory(factory.django.DjangoModelFactory[Trajectory]):
    class Meta:
        model = Trajectory

    incident = factory.SubFactory(IncidentFactory)
    status = Trajectory.Status.SUCCEEDED
    diagnosis = "the api process exits: DATABASE_URL is not set"
