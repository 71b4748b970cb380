"""Users with roles and permissions."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group, Permission, User


class UserFactory(factory.django.DjangoModelFactory[User]):
    """A user without a password (tests log in with force_login or API keys). ``roles``: names of the
    groups of app/web/roles.py; ``permissions``: codenames granted to the user directly."""

    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user-{n}")
    password = factory.LazyFunction(lambda: make_password(None))  # unusable: no login by password

    @factory.post_generation
    def roles(self, create: bool, extracted: list[str] | None, **kwargs: Any) -> None:
        if create and extracted:
            self.groups.add(*[Group.objects.get(name=name) for name in extracted])

    @factory.post_generation
    def permissions(self, create: bool, extracted: list[str] | None, **kwargs: Any) -> None:
        if create and extracted:
            self.user_permissions.add(*[Permission.objects.get(codename=name) for name in extracted])
