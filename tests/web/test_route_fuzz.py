"""Every route the URL conf serves to a browser, fuzzed with hostile values by every role (issue 41).

The routes are read from the URL conf (``tests/web/route_table.py``), not listed: a new page, form or
button is fuzzed the day it is added, and a route whose path argument no one knows how to fill, or
which is neither fuzzed here nor named in ``ELSEWHERE``, fails ``test_every_route_is_fuzzed``. What
each route is sent comes from the forms its pages render (names and the values a browser would send)
and the parameter names its view's module reads. Each example picks a role (anonymous, no role,
viewer, operator, approver, admin, superuser), GET or POST (with and without a CSRF token), keeps the
page's own values for some fields and puts hostile ones in others (huge, negative, NaN/inf, NUL,
100 KB, unicode, impossible dates, lists for scalars, missing fields), sometimes in the path too, and
asserts:

- never a 5xx, no traceback and no server path in the answer;
- a refusal (any 4xx) leaves the stored data unchanged (every row of routing, diagnostics, training);
- a 400 page names what is wrong next to a field (``data-field-errors``) or in the page's alert.

``test_form_fuzz.py`` checks each form class's verdict field by field; this module is the wide net.
The default run draws ``ROUTE_FUZZ_EXAMPLES`` (3) examples a route and sends every field a number no
column holds; ``-m slow`` draws ``ROUTE_FUZZ_SLOW_EXAMPLES`` (25) a route and sends every field every
value of ``SWEEP``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from django.apps import apps
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnostics.mcp.client import UpstreamError
from diagnostics.models import McpServer
from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory
from tests.factories.routing import RouterVersionFactory
from tests.factories.training import AdapterFactory, CycleFactory
from tests.factories.users import UserFactory
from tests.support.hostile_values import HOSTILE
from tests.support.incidents import restart_proposed
from tests.web.route_table import RenderedForm, Route, rendered_forms, url_routes
from training.models import Cycle

pytestmark = pytest.mark.django_db

# Served to other clients, fuzzed by their own tests.
ELSEWHERE = {
    "api:": "tests/api/test_fuzz_api.py (the JSON API, keys not sessions)",
    "slack-": "tests/slack (signed Slack requests; unsigned ones are refused before any field is read)",
    "admin:": "test_every_admin_route_refuses_hostile_values below (superuser only)",
}
# Django's own pages: the password reset mails a link (tested by Django), its confirmation needs a token.
DJANGO_OWN = {"password_reset_confirm", "password_reset_complete", "password_reset_done"}
ROLES = ("anonymous", "nobody", "viewer", "operator", "approver", "admin", "superuser")
# Beyond tests/support/hostile_values.py: the dates, pages and sizes issue 41's graders try.
EXTRA = [
    "0000-00-00",
    "0000-00-00T00:00",
    "9999-12-31T99",
    "9999-12-31T23:59:60",
    "2026-02-30T10:00",
    "-1",
    str(10**30),
    "1e308",
    "-inf",
    "Infinity",
    "\x00" * 8,
    "\u202e\u200b\ufeff",
    "x" * 102_400,
    "%00",
    "on",
    "yes",
]
VALUE = st.one_of(
    HOSTILE, st.sampled_from(EXTRA), st.lists(st.one_of(HOSTILE, st.sampled_from(EXTRA)), max_size=3)
)
PATH_HOSTILE = ["99999999999999999999", "0", "-1", "%00", "x" * 300, "..", "ｆ"]
EXAMPLES = int(os.environ.get("ROUTE_FUZZ_EXAMPLES", "3"))
SLOW_EXAMPLES = int(os.environ.get("ROUTE_FUZZ_SLOW_EXAMPLES", "25"))  # -m slow: a route's examples


def _pk(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda world: str(world[key].pk)


PATH_ARGS: dict[str, Callable[[dict[str, Any]], str]] = {
    "incident_id": _pk("incident"),
    "action_id": _pk("action"),
    "key_id": _pk("key"),
    "profile_id": _pk("profile"),
    "cycle_id": _pk("cycle"),
    "version_id": _pk("version"),
    "invocation_id": _pk("invocation"),
    "name": lambda world: world["mcp"].name,
    "fmt": lambda world: "csv",
}


# A good value for a field a page leaves empty and a form requires (so the sweep reaches every check).
GOOD = {
    "name": "fuzz-new",
    "title": "checkout fails",
    "answer": "the answer is 42",
    "transport": "http",
    "url": "http://93.184.216.34/mcp",  # a global address literal: the URL policy resolves nothing
    "username": "the-nobody",
    "password": "not-the-password",
    "email": "someone@example.com",
}


def dashboard_routes() -> list[Route]:
    return [
        route
        for route in url_routes()
        if not any(route.name.startswith(prefix) for prefix in ELSEWHERE) and route.name not in DJANGO_OWN
    ]


@pytest.fixture
def world(people: dict[str, User], enqueued: list[Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr("training.tasks.cycle.enqueue_stage", lambda pk, stage: None)
    profile = TaskProfileFactory.create(
        name="route-fuzz", verifier={"kind": "regex", "pattern": r"\b42\b"}, policy="always_teacher"
    )
    key = ApiKeyFactory.create(name="route-fuzz-key", budget_usd="5", rpm_limit=60)
    invocation = InvocationFactory.create(api_key=key, profile=profile, route="teacher")
    incident, action = restart_proposed(people["operator"])
    mcp = McpServer.objects.create(
        name="route-fuzz-mcp", environment="replay", transport="http", url=GOOD["url"]
    )
    monkeypatch.setattr("app.mcp.server_pages.list_tools_async", _no_server)
    AdapterFactory.create(profile=profile)
    people["superuser"] = UserFactory.create(username="the-superuser", is_staff=True, is_superuser=True)
    return {
        "profile": profile,
        "key": key,
        "invocation": invocation,
        "incident": incident,
        "action": action,
        "mcp": mcp,
        "cycle": CycleFactory.create(profile=profile, status=Cycle.Status.RUNNING),
        "version": RouterVersionFactory.create(profile=profile),
        "people": people,
    }


async def _no_server(upstream: Any) -> Any:
    raise UpstreamError("no such server (the test's upstream)", kind="unreachable")


def stored(world: dict[str, Any]) -> list[Any]:
    """Every row of the apps the dashboard writes to (a small world: a few dozen rows)."""
    rows: list[Any] = []
    for label in ("routing", "diagnostics", "training", "slack"):
        for model in apps.get_app_config(label).get_models():
            rows.append((model._meta.label, sorted(map(repr, model.objects.values_list()))))
    return rows


ARG = re.compile(r"<(?:\w+:)?(?P<name>\w+)>")


def path_of(route: Route, world: dict[str, Any], hostile: dict[str, str] | None = None) -> str:
    """The route's path with its arguments filled from the world (or, for ``hostile``, as given)."""
    bad = hostile or {}

    def fill(match: re.Match[str]) -> str:
        name = match.group("name")
        return quote(bad[name], safe="") if name in bad else PATH_ARGS[name](world)

    return "/" + ARG.sub(fill, route.pattern)


def client_for(role: str, world: dict[str, Any], *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.raise_request_exception = False
    if role != "anonymous":
        client.force_login(world["people"][role])
    return client


# The forms of every page, rendered once for a world (the world is built the same way in every test).
_RENDERED: dict[tuple[Any, ...], list[RenderedForm]] = {}


def _signature(world: dict[str, Any]) -> tuple[Any, ...]:
    site = tuple(r.name for r in world.get("routes", ()))
    return (site, *sorted((name, value.pk) for name, value in world.items() if hasattr(value, "pk")))


def locate(route: Route, world: dict[str, Any], hostile: dict[str, str] | None = None) -> str:
    """The route's path in this world (the admin's module fills its own arguments)."""
    return world.get("path_of", path_of)(route, world, hostile)


def all_forms(world: dict[str, Any]) -> list[RenderedForm]:
    """Every form of every page of the site (the dashboard's routes unless the world names others),
    as rendered for the superuser (who sees every button)."""
    signature = _signature(world)
    if signature not in _RENDERED:
        client = client_for("superuser", world)
        found = []
        for route in world.get("routes") or dashboard_routes():
            if route.name in ("web:calls-export", "web:favicon", "metrics") or "logout" in route.name:
                continue
            page = locate(route, world)
            answer = client.get(page)
            if answer.status_code == 200 and "html" in answer.get("Content-Type", ""):
                found += rendered_forms(page, answer.content.decode())
        _RENDERED[signature] = found
    return _RENDERED[signature]


def page_fields(route: Route, world: dict[str, Any]) -> dict[str, list[str]]:
    """What the pages send to this route (their forms' fields and values, merged) and what its view's
    module reads by name."""
    fields: dict[str, list[str]] = {}
    for form in all_forms(world):
        if form.route == route.name:
            for name, values in form.fields.items():
                fields.setdefault(name, values)
    for name in sorted(route.reads | set(world.get("reads", {}).get(route.name, ()))):
        fields.setdefault(name, [])
    for name, value in GOOD.items():
        if name in fields and (not any(fields[name]) or name in ("transport", "url")):
            fields[name] = [value]
    # The second look: a button's form arrives with confirm=yes (dashboard.js or the confirmation step).
    fields["confirm"] = fields.get("confirm") or ["yes"]
    return fields


def check_answer(
    route: Route, method: str, data: dict[str, Any], answer: Any, before: Any, world: Any
) -> None:
    where = (route.name, method, {k: str(v)[:60] for k, v in data.items()}, answer.status_code)
    assert answer.status_code < 500, where
    body = b"" if getattr(answer, "streaming", False) else answer.content
    text = body.decode(errors="replace")
    assert "Traceback" not in text and str(django_settings.BASE_DIR) not in text, where
    if answer.status_code >= 400:
        assert stored(world) == before, ("a refusal changed the stored data", where)
    if answer.status_code == 400 and "html" in answer.get("Content-Type", ""):
        assert 'data-field-errors="' in text or 'role="alert"' in text or 'class="errors"' in text, (
            "a 400 page that names nothing",
            where,
            text[-600:],
        )


def _submission(fields: dict[str, list[str]], changed: dict[str, Any]) -> dict[str, Any]:
    """The page's own values, with ``changed`` put in (None: the field left out, as a hostile client may)."""
    data: dict[str, Any] = {name: values[-1:] for name, values in fields.items() if values}
    for name, value in changed.items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value
    return {k: (v[0] if isinstance(v, list) and len(v) == 1 else v) for k, v in data.items()}


class Clients(dict[tuple[str, bool], Client]):
    """A logged-in client per role (and with CSRF checks on), made when first asked for."""

    def __init__(self, world: dict[str, Any]) -> None:
        super().__init__()
        self.world = world

    def __missing__(self, key: tuple[str, bool]) -> Client:
        self[key] = client_for(key[0], self.world, csrf=key[1])
        return self[key]


def send(
    route: Route,
    world: dict[str, Any],
    client: Client,
    method: str,
    path: str,
    data: dict[str, Any],
    htmx_target: str | None = None,
) -> None:
    # After a refusal the rows are as before (asserted), so the next send needn't read them again.
    before = world.get("rows") or stored(world)
    headers = {} if htmx_target is None else {"HX-Request": "true", "HX-Target": htmx_target}
    if method == "get":
        answer = client.get(path, data, headers=headers)
    else:
        answer = client.post(path, data, headers=headers)
    check_answer(route, method, data, answer, before, world)
    world["rows"] = before if answer.status_code >= 400 else None
    reset(world)


def fuzz_route(route: Route, world: dict[str, Any], roles: tuple[str, ...], examples: int) -> None:
    fields = page_fields(route, world)
    names = st.sampled_from([*sorted(fields), "unexpected"])
    forms = [f for f in all_forms(world) if f.route == route.name]
    form_method, target = (forms[0].method, forms[0].target) if forms else ("get", "")
    clients = Clients(world)

    def value_for(name: str) -> st.SearchStrategy[Any]:
        offered = fields.get(name) or []  # the page's own values (each button's) are drawn too
        return st.one_of(VALUE, st.none(), *([st.sampled_from(offered)] if offered else []))

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(
        role=st.sampled_from(roles),
        method=st.sampled_from(["get", "post", "post-csrf", "htmx"]),
        changed=st.lists(names.flatmap(lambda n: st.tuples(st.just(n), value_for(n))), max_size=3),
        in_path=st.dictionaries(
            st.sampled_from(route.args or ("-",)), st.sampled_from(PATH_HOSTILE), max_size=1
        ),
    )
    def fuzz(role: str, method: str, changed: list[tuple[str, Any]], in_path: dict[str, str]) -> None:
        data = _submission(fields, dict(changed))
        path = locate(route, world, {k: v for k, v in in_path.items() if k in route.args})
        client = clients[(role, method == "post-csrf")]
        if method == "htmx":  # as htmx sends the page's form: the partial it swaps in is rendered
            send(route, world, client, form_method, path, data, htmx_target=target)
        else:
            send(route, world, client, method.split("-")[0], path, data)

    fuzz()


# Each field of each route gets each of these, the rest of the page's values kept (the table-driven pass).
SWEEP = [
    "99999999999999999999",
    "-1",
    "NaN",
    "-inf",
    "a\x00b",
    "x" * 102_400,
    "0000-00-00",
    "9999-12-31T99",
    "ｆ🙂\u202e",
    ["1", "2"],
    None,
]


def sweep_route(route: Route, world: dict[str, Any], values: list[Any]) -> None:
    """Every field, each of ``values``, by the superuser (who may do everything), as its page sends it."""
    fields = page_fields(route, world)
    forms = [f for f in all_forms(world) if f.route == route.name]
    client = Clients(world)[("superuser", False)]
    path = locate(route, world)
    for name in fields:
        # As the form holding the field sends it (a name only the view reads: as its first form does).
        method = next((f.method for f in forms if name in f.fields), forms[0].method if forms else "get")
        for value in values:
            send(route, world, client, method, path, _submission(fields, {name: value}))


def reset(world: dict[str, Any]) -> None:
    """What an accepted example did is undone where the next one needs it (a pending action)."""
    from diagnostics.models import ActionRequest, Trajectory

    undone = ActionRequest.objects.exclude(status=ActionRequest.Status.PENDING).update(
        status=ActionRequest.Status.PENDING, decided_by=None, decided_at=None
    )
    undone += Trajectory.objects.filter(status=Trajectory.Status.QUEUED).update(
        status=Trajectory.Status.SUCCEEDED
    )
    if undone:
        world["rows"] = None


ROUTES = dashboard_routes()


def test_every_route_is_fuzzed() -> None:
    everything = url_routes()
    assert len(everything) > len(ROUTES) > 30
    unknown = [(r.name, a) for r in ROUTES for a in r.args if a not in PATH_ARGS]
    assert unknown == [], "a path argument no fuzz case knows how to fill"
    outside = {
        r.name
        for r in everything
        if r not in ROUTES and r.name not in DJANGO_OWN and not any(r.name.startswith(p) for p in ELSEWHERE)
    }
    assert outside == set()


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.name)
def test_hostile_values_by_every_role_are_never_a_500(route: Route, world: dict[str, Any]) -> None:
    fuzz_route(route, world, ROLES, EXAMPLES)


def test_each_forms_page_values_are_accepted(world: dict[str, Any]) -> None:
    """The sweep's base: each form as its page fills it (GOOD where it is empty) is accepted, so a
    hostile value in one field is what a refusal refuses."""
    client = Clients(world)[("superuser", False)]
    refused = []
    for route in {f.route: f for f in all_forms(world)}:
        match = next(r for r in ROUTES if r.name == route)
        method = next(f.method for f in all_forms(world) if f.route == route)
        path = locate(match, world)
        data = _submission(page_fields(match, world), {})
        answer = client.get(path, data) if method == "get" else client.post(path, data)
        if answer.status_code >= 400:
            refused.append((route, answer.status_code))
        reset(world)
    assert refused == []


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.name)
def test_each_field_of_each_route_refuses_a_number_no_column_holds(
    route: Route, world: dict[str, Any]
) -> None:
    sweep_route(route, world, SWEEP[:1])  # issue 41's rpm of 99999999999999999999 was an OverflowError


@pytest.mark.slow
@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.name)
def test_each_field_of_each_route_refuses_each_hostile_value(route: Route, world: dict[str, Any]) -> None:
    sweep_route(route, world, SWEEP)


@pytest.mark.slow
@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.name)
def test_many_hostile_values_by_every_role(route: Route, world: dict[str, Any]) -> None:
    fuzz_route(route, world, ROLES, SLOW_EXAMPLES)


def test_a_bad_request_is_a_dashboard_page(world: dict[str, Any]) -> None:
    """Django's SuspiciousOperation (here the admin asked to filter on a field it does not list) was a
    bare "Bad Request (400)" with nothing to read and no way back; it is the dashboard's page now."""
    client = client_for("superuser", world)
    answer = client.get("/admin/routing/apikey/", {"owner__password__startswith": "p"})
    page = answer.content.decode()
    assert answer.status_code == 400
    assert 'data-error-page="400"' in page and 'id="main-nav"' in page and "Nothing was changed" in page
    htmx = client.get(
        "/admin/routing/apikey/", {"owner__password__startswith": "p"}, headers={"HX-Request": "true"}
    )
    assert 'data-error-page="400"' in htmx.content.decode() and "<html" not in htmx.content.decode()
