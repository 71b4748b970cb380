"""Dashboard users with a password (the browser tests log in through the login form)."""

from __future__ import annotations

from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User

from tests.factories import UserFactory

PASSWORD = "correct horse battery staple"


def dashboard_user(username: str, *role_names: str) -> User:
    """A user holding ``role_names`` (groups of app/web/roles.py) who logs in with ``PASSWORD``."""
    return UserFactory.create(
        username=username,
        email=f"{username}@example.com",
        password=make_password(PASSWORD),
        roles=list(role_names),
    )
