"""The dashboard's actions that have no form class, and its pages' query parameters, fuzzed with hostile
values (issue 41): approve and deny (with their note, the plan they were shown and the confirmation),
start and cancel a cycle, roll an adapter back, revoke a key, delete an MCP server, and the pages'
``range``, ``profile``, ``page`` and ``tail`` parameters. ``test_form_fuzz.py`` covers every form class
(on one page each); the profile form is fuzzed here on its second page too, where a profile is created.

Each submission sends hostile values for some of the fields the view reads, and sometimes a field it does
not know; the answer is never a 500, always one of the view's own answers, and never shows a server path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings as settings_module
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.web.forms import TaskProfileForm
from diagnostics.models import McpServer
from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory
from tests.factories.training import CycleFactory
from tests.support.hostile_values import HOSTILE, MISSING
from tests.support.hostile_values import VALUE as FORM_VALUE
from tests.support.incidents import restart_proposed
from tests.web.test_form_fuzz import PROFILE_BASE, Case, _check, _profile_state
from training.models import Cycle

pytestmark = pytest.mark.django_db

VALUE = st.one_of(HOSTILE, st.lists(HOSTILE, min_size=2, max_size=3), st.just(MISSING), st.just("yes"))


@dataclass
class Action:
    name: str
    role: str
    url: Callable[[dict[str, Any]], str]
    fields: tuple[str, ...]
    answers: tuple[int, ...]
    method: str = "post"


def _action_url(decision: str) -> Callable[[dict[str, Any]], str]:
    return lambda w: reverse(f"web:action-{decision}", args=[w["incident"].pk, w["action"].pk])


ACTIONS = [
    Action("overview", "viewer", lambda w: reverse("web:overview"), ("range",), (200,), "get"),
    Action(
        "calls", "viewer", lambda w: reverse("web:calls"), ("page", "tail", "q", "route"), (200, 400), "get"
    ),
    Action(
        "export",
        "viewer",
        lambda w: reverse("web:calls-export", args=["csv"]),
        ("page", "q", "key", "since"),
        (200, 400),
        "get",
    ),
    Action("learning", "viewer", lambda w: reverse("web:learning"), ("profile",), (200,), "get"),
    Action("router", "viewer", lambda w: reverse("web:router"), ("profile",), (200,), "get"),
    # Approve: the confirmation step (200), done (302), or refused by the service (plan changed, decided).
    Action(
        "approve", "approver", _action_url("approve"), ("note", "plan_hash", "confirm"), (200, 302, 400, 409)
    ),
    Action("deny", "approver", _action_url("deny"), ("note", "confirm"), (302, 400, 409)),
    Action(
        "cycle-start",
        "operator",
        lambda w: reverse("web:cycle-start", args=[w["profile"].pk]),
        ("confirm",),
        (200, 302),
    ),
    Action(
        "cycle-cancel",
        "operator",
        lambda w: reverse("web:cycle-cancel", args=[w["profile"].pk, w["cycle"].pk]),
        ("confirm",),
        (302,),
    ),
    Action(
        "adapter-rollback",
        "admin",
        lambda w: reverse("web:adapter-rollback", args=[w["profile"].pk]),
        ("confirm",),
        (200, 302),  # the confirmation step, or done
    ),
    Action(
        "key-revoke", "admin", lambda w: reverse("web:key-revoke", args=[w["key"].pk]), ("confirm",), (302,)
    ),
    Action(
        "mcp-delete",
        "admin",
        lambda w: reverse("web:mcp-server-delete", args=[w["mcp"].name]),
        ("confirm",),
        (200, 302, 404),  # 404 once an earlier example deleted it
    ),
]


@pytest.fixture
def world(people: dict[str, Any], enqueued: list[Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr("training.tasks.cycle.enqueue_stage", lambda pk, stage: None)
    profile = TaskProfileFactory.create(name="fuzz-actions")
    key = ApiKeyFactory.create(name="fuzz-actions-key")
    InvocationFactory.create(api_key=key, profile=profile, route="teacher")
    incident, action = restart_proposed(people["operator"])
    mcp = McpServer.objects.create(
        name="fuzz-actions-mcp", environment="replay", transport="http", url="http://127.0.0.1:9/mcp"
    )
    cycle = CycleFactory.create(profile=profile, status=Cycle.Status.RUNNING)
    return {
        "profile": profile,
        "key": key,
        "incident": incident,
        "action": action,
        "mcp": mcp,
        "cycle": cycle,
    }


@pytest.mark.parametrize("action", ACTIONS, ids=lambda action: action.name)
def test_hostile_values_never_make_an_action_fail(action: Action, as_role, world) -> None:
    client = as_role(action.role)
    url = action.url(world)
    names = st.sampled_from([*action.fields, "unexpected", "csrfmiddlewaretoken"])

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(values=st.dictionaries(names, VALUE, max_size=3))
    def fuzz(values: dict[str, Any]) -> None:
        data = {k: v for k, v in values.items() if v is not MISSING}
        response = client.get(url, data) if action.method == "get" else client.post(url, data)
        assert response.status_code in action.answers, (data, response.status_code)
        if not getattr(response, "streaming", False):
            body = response.content.decode(errors="replace")
            assert str(settings_module.BASE_DIR) not in body and "Traceback" not in body

    fuzz()


KNOWN = [
    ("approve", {"note": "a\x00b", "confirm": "yes"}),  # NUL: PostgreSQL refuses it in a text column
    ("approve", {"plan_hash": "x" * 100_001, "confirm": "yes"}),
    ("deny", {"note": "\x00" * 3000}),
    ("cycle-start", {"confirm": ["yes", "no"]}),
    ("mcp-delete", {"confirm": "\x00"}),
]


@pytest.mark.postgres
def test_known_hostile_values_are_answered(as_role, world) -> None:
    for name, data in KNOWN:
        action = next(a for a in ACTIONS if a.name == name)
        response = as_role(action.role).post(action.url(world), data)
        assert response.status_code in action.answers, (name, data, response.status_code)


PROFILE_CREATE = Case(
    TaskProfileForm,
    "admin",
    url=lambda world: reverse("web:profiles"),
    base=lambda world: {**PROFILE_BASE, "name": "fuzz-created"},
    build=lambda world, data: TaskProfileForm(data),
    accepted=(302,),
    snapshot=_profile_state,
)


def test_hostile_values_in_a_new_profile_get_a_field_message(as_role, world) -> None:
    client = as_role("admin")

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(name=st.sampled_from(list(TaskProfileForm.base_fields)), value=FORM_VALUE)
    def fuzz(name: str, value: Any) -> None:
        _check(client, PROFILE_CREATE, world, name, value)

    fuzz()
