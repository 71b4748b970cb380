"""The drift banner (routing/router/alerts.py ``flagged``): the overview and the router page name every
drifting profile, a router version's drift and a fixed fallback's alike."""

from __future__ import annotations

import pytest
from django.urls import reverse

from routing.models import ProfileDrift, RouterVersion
from tests.factories import RouterVersionFactory
from tests.support.ledger import learned_profile


@pytest.mark.django_db
def test_the_dashboard_names_every_drifting_profile(login) -> None:
    """The banner on the overview and the router page: a drifting version and a drifting fallback."""
    drifting = learned_profile(name="drifting-fallback")
    ProfileDrift.objects.create(
        profile=drifting, flag=True, reason="cost per call $0.0100 vs $0.0020 baseline"
    )
    versioned = learned_profile(name="drifting-version")
    RouterVersionFactory.create(
        profile=versioned,
        number=2,
        status=RouterVersion.Status.ACTIVE,
        drift_flag=True,
        drift_reason="PSI 0.41",
    )
    learned_profile(name="steady")
    client = login("viewer")
    for url in (reverse("web:overview"), reverse("web:router") + f"?profile={drifting.pk}"):
        html = client.get(url).content.decode()
        assert "data-drift-alerts" in html, url
        assert "the fixed fallback of drifting-fallback</a> is drifting: cost per call" in html
        assert "router v2 of drifting-version</a> is drifting: PSI 0.41" in html
        assert 'data-drift-alert="steady"' not in html
    html = client.get(reverse("web:router") + f"?profile={drifting.pk}").content.decode()
    assert "data-fallback-drift" in html and "drifting" in html
