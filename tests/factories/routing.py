"""Keys (with their secret), backends, profiles, budgets, invocations, router versions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import factory
from django.utils import timezone

from routing.access.keys import generate_key
from routing.models import (
    ApiKey,
    Backend,
    BudgetLease,
    Invocation,
    ProfileDrift,
    Reservation,
    RouterVersion,
    SampleSpend,
    TaskProfile,
)
from tests.factories.users import UserFactory


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


def make_role_key(username: str, *roles: str, scopes: list[str], **fields: object) -> KeyPair:
    """A key owned by a new user holding the dashboard ``roles`` (groups of app/web/roles.py)."""
    owner = UserFactory.create(username=username, roles=list(roles))
    return make_key(name=username, owner=owner, scopes=scopes, **fields)


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


def claude_teacher(api_base: str) -> Backend:
    """A teacher served by litellm's Anthropic provider, at Claude's list prices, on a local stub."""
    return BackendFactory.create(
        name="claude-teacher",
        role=Backend.Role.TEACHER,
        model="anthropic/claude-stub-1",
        api_base=api_base,
        input_cost_per_token=Decimal("0.000003"),
        output_cost_per_token=Decimal("0.000015"),
    )


class TaskProfileFactory(factory.django.DjangoModelFactory[TaskProfile]):
    class Meta:
        model = TaskProfile
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"profile-{n}")
    policy = TaskProfile.Policy.STUDENT_WITH_FALLBACK
    verifier = factory.LazyFunction(dict)


class ReservationFactory(factory.django.DjangoModelFactory[Reservation]):
    class Meta:
        model = Reservation

    api_key = factory.SubFactory(ApiKeyFactory)
    amount_usd = Decimal("0.01")
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(minutes=5))


class BudgetLeaseFactory(factory.django.DjangoModelFactory[BudgetLease]):
    class Meta:
        model = BudgetLease

    api_key = factory.SubFactory(ApiKeyFactory)
    process_id = factory.Sequence(lambda n: f"testhost-{n}-0")
    host = "testhost"
    amount_usd = Decimal("0.10")
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(minutes=1))


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
    # One leg, on the backend that served the call, with the call's verdict (free: tokens default to 0).
    legs = factory.LazyAttribute(
        lambda o: [
            {
                "backend": o.served_by,
                "role": o.served_by,
                "model": f"{o.served_by}-model",
                "cost_usd": "0",
                "latency_ms": 0.0,
                "verdict": o.verdict,
            }
        ]
    )


class RouterVersionFactory(factory.django.DjangoModelFactory[RouterVersion]):
    """A version being trained (the default status); pass ``status`` and its numbers for others."""

    class Meta:
        model = RouterVersion

    profile = factory.SubFactory(TaskProfileFactory, policy=TaskProfile.Policy.LEARNED)
    number = factory.Sequence(lambda n: n + 1)
    target_pass_rate = 0.97


class ProfileDriftFactory(factory.django.DjangoModelFactory[ProfileDrift]):
    """The drift watch of a learned profile no version routes (not flagged)."""

    class Meta:
        model = ProfileDrift

    profile = factory.SubFactory(TaskProfileFactory, policy=TaskProfile.Policy.LEARNED)


class SampleSpendFactory(factory.django.DjangoModelFactory[SampleSpend]):
    class Meta:
        model = SampleSpend

    profile = factory.SubFactory(TaskProfileFactory)
    day = factory.LazyFunction(lambda: timezone.now().date())
