"""A username longer than any user's, tried at the login form, is a failed login like another (counted
by axes, locked out at the limit), never a 500: whole, it did not fit axes' own column and PostgreSQL
refused the insert (SQLite does not check a column's length, hence the `postgres` mark: CI runs this
again on PostgreSQL)."""

from __future__ import annotations

import pytest
import requests
from axes.models import AccessAttempt

from tests.security.test_edge_limits import attempt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_a_username_longer_than_any_users_is_counted_and_locked_out_never_a_500(gateway_url, settings):
    name = "x" * 20_000
    session = requests.Session()
    statuses = [
        attempt(session, gateway_url, name, f"guess-{n}").status_code
        for n in range(settings.AXES_FAILURE_LIMIT)
    ]
    assert statuses[:-1] == [200] * (settings.AXES_FAILURE_LIMIT - 1) and statuses[-1] == 429, statuses
    stored = list(AccessAttempt.objects.values_list("username", flat=True))
    assert stored == ["x" * 150], [len(s or "") for s in stored]
