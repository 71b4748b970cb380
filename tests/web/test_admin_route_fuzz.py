"""Every route of the Django admin, read from the URL conf, fuzzed like the dashboard's (issue 41).

The same machinery as ``test_route_fuzz.py``: each admin page is rendered for a superuser, its forms
(add, change, delete, the change list's search and action forms, the held-tool step) are sent back with
one hostile value at a time, and the change lists also get their filters, search, sort and page
parameters (``o``, ``p``, ``q`` and each ``list_filter``'s ``__exact``) with hostile values. Never a 5xx;
a refusal changes nothing stored; a 400 names what is wrong. Slow: the admin is 100-odd routes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.urls import NoReverseMatch, reverse

from tests.factories.diagnostics import SlackEventFactory, SlackUserFactory
from tests.factories.mcp import McpGrantFactory, McpToolFactory
from tests.factories.routing import BackendFactory
from tests.factories.training import TrainingRunFactory, TrainingSettingsFactory
from tests.web.route_table import Route, url_routes
from tests.web.test_route_fuzz import ARG, EXAMPLES, ROLES, SWEEP, fuzz_route, sweep_route
from tests.web.test_route_fuzz import world as dashboard_world  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

ADMIN_ROUTES = [route for route in url_routes() if route.name.startswith("admin:")]
# One value of each kind of SWEEP for the admin's 137 routes (the whole list doubled the slow suite's
# CPU for no new failure): a number no column holds, a negative, a NaN, a NUL, 100 KB, an impossible
# date-time, a list where one value goes (3fd4c7f's admin 500s were huge ids, NaN in JSON, a number
# where a JSON object goes, and empty add forms).
ADMIN_SWEEP = [SWEEP[0], SWEEP[1], SWEEP[2], SWEEP[4], SWEEP[5], SWEEP[7], SWEEP[9]]
# The change list's own parameters: sort, page, search, the error flag, the popup's.
LIST_READS = ("o", "p", "q", "e", "all", "_popup", "_to_field", "_changelist_filters")


def _model_of(route: Route) -> Any:
    model_admin = getattr(route.callback, "model_admin", None)
    if model_admin is not None:
        return model_admin.model
    parts = route.pattern.split("/")  # "admin/<app>/<model>/<path:object_id>/" redirects to the change
    return ContentType.objects.get_by_natural_key(parts[1], parts[2]).model_class()


def admin_path(route: Route, world: dict[str, Any], hostile: dict[str, str] | None = None) -> str:
    bad = hostile or {}

    def fill(name: str) -> str:
        if name in bad:
            return bad[name]
        if name == "app_label":
            return "routing"
        if name == "content_type_id":
            return str(ContentType.objects.get_for_model(world["profile"]).pk)
        if name == "url":
            return "no/such/page/"
        if name == "object_id" and "content_type_id" in route.args:
            return str(world["profile"].pk)
        row = _model_of(route).objects.order_by("pk").first()
        return str(row.pk) if row is not None else "1"

    if ":" in route.name and "/" not in route.name:
        kwargs = {name: fill(name) for name in route.args}
        try:
            return reverse(route.name, kwargs=kwargs)
        except (
            NoReverseMatch
        ):  # a hostile value its pattern does not take (app_list's app_label): sent anyway
            return reverse(route.name, kwargs={**kwargs, **{n: "routing" for n in bad}}).replace(
                "/routing/", "/" + "/".join(quote(bad[n], safe="") for n in bad) + "/"
            )
    if "(?P<" in route.pattern:
        return "/admin/" + fill("url")
    return "/" + ARG.sub(lambda m: fill(m.group("name")), route.pattern)


def _list_reads() -> dict[str, list[str]]:
    reads: dict[str, list[str]] = {}
    for model, model_admin in admin.site._registry.items():
        name = f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"
        filters = [f for f in model_admin.list_filter if isinstance(f, str)]
        reads[name] = [*LIST_READS, *(f"{f}__exact" for f in filters), *(f"{f}__id__exact" for f in filters)]
    return reads


@pytest.fixture
def world(dashboard_world: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    """The dashboard's world, a row of every model the admin lists, and the admin's routes."""
    BackendFactory.create()
    TrainingSettingsFactory.create()
    TrainingRunFactory.create()
    McpGrantFactory.create(server=McpToolFactory.create(server=dashboard_world["mcp"]).server)
    SlackEventFactory.create()
    SlackUserFactory.create()
    Group.objects.get_or_create(name="fuzz-team")
    return {**dashboard_world, "routes": ADMIN_ROUTES, "path_of": admin_path, "reads": _list_reads()}


def test_every_admin_route_is_reached() -> None:
    assert len(ADMIN_ROUTES) > 60
    assert {r.name for r in ADMIN_ROUTES if r.name.endswith("_change")} >= {
        f"admin:{m._meta.app_label}_{m._meta.model_name}_change" for m in admin.site._registry
    }


@pytest.mark.parametrize("route", ADMIN_ROUTES, ids=lambda route: route.name)
def test_each_admin_field_refuses_each_hostile_value(route: Route, world: dict[str, Any]) -> None:
    sweep_route(route, world, ADMIN_SWEEP)


@pytest.mark.parametrize("route", ADMIN_ROUTES, ids=lambda route: route.name)
def test_hostile_admin_submissions_by_every_role(route: Route, world: dict[str, Any]) -> None:
    fuzz_route(route, world, ROLES, EXAMPLES)
