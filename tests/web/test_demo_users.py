"""The bootstrap's demo users: the admin who opens incidents and an approver who may approve them."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from app.demo import DEMO_APPROVER, bootstrap_demo
from diagnostics.services import APPROVE_PERMISSION

pytestmark = pytest.mark.django_db


def test_bootstrap_creates_a_demo_approver_once() -> None:
    first = bootstrap_demo()
    assert first.approver == DEMO_APPROVER and first.approver_password
    approver = User.objects.get(username=DEMO_APPROVER)
    assert approver.check_password(first.approver_password)
    assert approver.has_perm(APPROVE_PERMISSION) and not approver.is_superuser
    again = bootstrap_demo()
    assert again.approver is None and again.approver_password is None
    assert User.objects.filter(username=DEMO_APPROVER).count() == 1
