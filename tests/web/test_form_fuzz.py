"""Every dashboard form, fuzzed through Django's test client with hostile values (Hypothesis).

One field of a valid submission at a time gets a hostile value (huge and negative numbers, NaN and
infinities, NUL, unicode, long strings, several values for one field, or nothing at all). The form's
own verdict on the same data (computed before the request) predicts the answer:

- never a 500;
- refused: a 400 whose message sits next to the field that was changed (``data-field-errors``), and
  nothing stored or changed;
- accepted: the success answer, and what was stored is exactly what the form cleaned.

``test_every_form_is_fuzzed`` fails when a form joins ``app.web.forms.ALL_FORMS`` without a case here;
``test_every_field_is_bounded`` holds every number to a range and every text to a length.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django import forms
from django.conf import settings as settings_module
from django.http import HttpResponse, QueryDict
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.web.forms import (
    ALL_FORMS,
    ActionDecisionForm,
    ApiKeyCreateForm,
    ApiKeyEditForm,
    CallFilterForm,
    IncidentOpenForm,
    McpServerEditForm,
    McpServerForm,
    RediagnoseForm,
    TaskProfileForm,
    VerifierTryForm,
)
from diagnostics import services
from diagnostics.models import ActionRequest, Incident, McpServer, Trajectory
from routing.models import ApiKey, TaskProfile
from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory
from tests.factories.diagnostics import IncidentFactory
from tests.support.hostile_values import MISSING, VALUE

pytestmark = pytest.mark.django_db


@dataclass
class Case:
    """How to submit one form and what its answer and the database must show."""

    form: type[forms.BaseForm]
    role: str
    url: Callable[[dict[str, Any]], str]
    base: Callable[[dict[str, Any]], dict[str, Any]]
    build: Callable[[dict[str, Any], dict[str, Any]], forms.BaseForm]
    method: str = "post"
    accepted: tuple[int, ...] = (200, 201, 302)
    prefix: Callable[[dict[str, Any]], str] = lambda world: ""
    snapshot: Callable[[dict[str, Any]], Any] = lambda world: None
    stored: Callable[[dict[str, Any], forms.BaseForm, HttpResponse], None] | None = None
    fields: list[str] = field(default_factory=list)


def _key_state(world: dict[str, Any]) -> Any:
    key = ApiKey.objects.get(pk=world["key"].pk)
    return (
        ApiKey.objects.count(),
        key.budget_usd,
        key.rpm_limit,
        key.scopes,
        key.expires_at,
        key.budget_period,
    )


def _key_created(world: dict[str, Any], form: forms.BaseForm, response: HttpResponse) -> None:
    key = ApiKey.objects.order_by("-pk").first()
    assert key is not None
    data = form.cleaned_data
    assert (key.name, key.budget_usd, key.rpm_limit, key.scopes, key.budget_period) == (
        data["name"],
        data["budget_usd"],
        data["rpm_limit"],
        data["scopes"],
        data["budget_period"],
    )


def _key_edited(world: dict[str, Any], form: forms.BaseForm, response: HttpResponse) -> None:
    key = ApiKey.objects.get(pk=world["key"].pk)
    data = form.cleaned_data
    assert (key.budget_usd, key.rpm_limit, key.scopes, key.expires_at, key.budget_period) == (
        data["budget_usd"],
        data["rpm_limit"],
        data["scopes"],
        data["expires_at"],
        data["budget_period"],
    )


def _incident_opened(world: dict[str, Any], form: forms.BaseForm, response: HttpResponse) -> None:
    incident = Incident.objects.order_by("-pk").first()
    assert incident is not None
    assert (incident.title, incident.description, incident.environment) == (
        form.cleaned_data["title"],
        form.cleaned_data["description"],
        form.cleaned_data["environment"],
    )


def _profile_saved(world: dict[str, Any], form: forms.BaseForm, response: HttpResponse) -> None:
    assert isinstance(form, TaskProfileForm)
    saved = TaskProfile.objects.get(name=form.cleaned_data["name"])
    for name, value in form.profile_fields().items():
        stored = getattr(saved, name)
        assert stored == value, (name, stored, value)


def _profile_state(world: dict[str, Any]) -> Any:
    return sorted(
        TaskProfile.objects.values_list("name", "policy", "policy_params", "verifier", "max_tokens")
    )


def _verdict_shown(world: dict[str, Any], form: forms.BaseForm, response: HttpResponse) -> None:
    assert re.search(rb'data-verdict="(pass|fail)"', response.content), response.content[-800:]


MCP_BASE = {
    "environment": "replay",
    "transport": "http",
    "url": "http://93.184.216.34/mcp",  # a global address literal: the URL policy resolves nothing
    "timeout_s": "10",
    "max_output_bytes": "64000",
}
MCP_FIELDS = ("environment", "transport", "command", "url", "secret_env", "allow_list", "timeout_s")


def _mcp_state(world: dict[str, Any]) -> Any:
    return sorted(McpServer.objects.values_list("name", *MCP_FIELDS, "max_output_bytes"))


def _mcp_saved(name: str) -> Callable[[dict[str, Any], forms.BaseForm, HttpResponse], None]:
    def check(world: dict[str, Any], form: forms.BaseForm, response: HttpResponse) -> None:
        assert isinstance(form, McpServerEditForm)
        saved = McpServer.objects.get(name=form.cleaned_data.get("name", name))
        for field_name, value in form.server_fields().items():
            assert getattr(saved, field_name) == value, (field_name, getattr(saved, field_name), value)

    return check


PROFILE_BASE = {
    "name": "fuzzed",
    "policy": "always_teacher",
    "verifier_max_timeout_s": "10",
    "verifier_max_memory_mb": "512",
}

CASES = [
    Case(
        CallFilterForm,
        "viewer",
        url=lambda world: reverse("web:calls"),
        base=lambda world: {"route": "teacher"},
        build=lambda world, data: CallFilterForm(data),
        method="get",
        accepted=(200,),
        snapshot=lambda world: ApiKey.objects.count(),
    ),
    Case(
        IncidentOpenForm,
        "operator",
        url=lambda world: reverse("web:incidents"),
        base=lambda world: {"title": "checkout fails", "environment": "replay", "case": world["case"]},
        build=lambda world, data: IncidentOpenForm(data),
        accepted=(302,),
        snapshot=lambda world: Incident.objects.count(),
        stored=_incident_opened,
    ),
    Case(
        RediagnoseForm,
        "operator",
        url=lambda world: reverse("web:incident-rediagnose", args=[world["incident"].pk]),
        base=lambda world: {"mode": "analyzers", "confirm": "yes"},
        build=lambda world, data: RediagnoseForm(data),
        accepted=(302,),
        # One queued diagnosis at a time: the case finishes each one it starts (see _after).
        snapshot=lambda world: Trajectory.objects.filter(status=Trajectory.Status.QUEUED).count(),
    ),
    Case(
        ActionDecisionForm,
        "approver",
        url=lambda world: reverse("web:action-approve", args=[world["incident"].pk, world["action"].pk]),
        base=lambda world: {"note": "looks right", "confirm": "yes"},
        build=lambda world, data: ActionDecisionForm(data),
        accepted=(302,),
        snapshot=lambda world: list(ActionRequest.objects.values_list("status", "decision_note")),
        stored=lambda world, form, response: _decided(world, form.cleaned_data["note"]),
    ),
    Case(
        ApiKeyCreateForm,
        "admin",
        url=lambda world: reverse("web:keys"),
        base=lambda world: {"name": "fuzzed", "budget_usd": "5", "rpm_limit": "60", "scopes": ["llm"]},
        build=lambda world, data: ApiKeyCreateForm(data),
        accepted=(201,),
        snapshot=lambda world: ApiKey.objects.count(),
        stored=_key_created,
    ),
    Case(
        ApiKeyEditForm,
        "admin",
        url=lambda world: reverse("web:key-edit", args=[world["key"].pk]),
        base=lambda world: {"budget_usd": "7.5", "rpm_limit": "30", "scopes": ["llm"]},
        build=lambda world, data: ApiKeyEditForm.for_key(world["key"], data),
        prefix=lambda world: f"key{world['key'].pk}-",
        accepted=(302,),
        snapshot=_key_state,
        stored=_key_edited,
    ),
    Case(
        TaskProfileForm,
        "admin",
        url=lambda world: reverse("web:profile", args=[world["profile"].pk]),
        base=lambda world: {**PROFILE_BASE, "name": world["profile"].name},
        build=lambda world, data: TaskProfileForm(data, instance=world["profile"]),
        accepted=(302,),
        snapshot=_profile_state,
        stored=_profile_saved,
    ),
    Case(
        McpServerForm,
        "admin",
        url=lambda world: reverse("web:mcp-server-new"),
        base=lambda world: {**MCP_BASE, "name": "fuzzed"},
        build=lambda world, data: McpServerForm(data),
        accepted=(302,),
        snapshot=_mcp_state,
        stored=_mcp_saved("fuzzed"),
    ),
    Case(
        McpServerEditForm,
        "admin",
        url=lambda world: reverse("web:mcp-server-edit", args=[world["mcp"].name]),
        base=lambda world: dict(MCP_BASE),
        build=lambda world, data: McpServerEditForm.for_server(world["mcp"], data),
        accepted=(302,),
        snapshot=_mcp_state,
        stored=_mcp_saved("fuzz-edit"),
    ),
    Case(
        VerifierTryForm,
        "admin",
        url=lambda world: reverse("web:profile-try", args=[world["profile"].pk]),
        base=lambda world: {"answer": "the answer is 42"},
        build=lambda world, data: VerifierTryForm(data),
        accepted=(200,),
        snapshot=_profile_state,
        stored=_verdict_shown,
    ),
]


@pytest.fixture
def world(people: dict[str, Any], enqueued: list[Any]) -> dict[str, Any]:
    profile = TaskProfileFactory.create(
        name="fuzz-profile", verifier={"kind": "regex", "pattern": r"\b42\b"}, policy="always_teacher"
    )
    key = ApiKeyFactory.create(name="fuzz-key")
    InvocationFactory.create(api_key=key, profile=profile, route="teacher")
    incident = IncidentFactory.create(title="fuzz", created_by=people["viewer"])
    trajectory = Trajectory.objects.create(incident=incident, status=Trajectory.Status.SUCCEEDED)
    action = services.action_request_propose(trajectory=trajectory, tool="restart_service", args={})
    mcp = McpServer.objects.create(
        name="fuzz-edit", environment="replay", transport="http", url=MCP_BASE["url"]
    )
    return {
        "profile": profile,
        "key": key,
        "incident": incident,
        "case": "test_ask_holmes/09_crashpod",
        "mcp": mcp,
        "action": action,
    }


def _field_names(form: type[forms.BaseForm]) -> list[str]:
    return list(form.base_fields)


def _after(case: Case) -> None:
    # A diagnosis queued by a fuzzed "diagnose again" is marked done, so the next one may start.
    Trajectory.objects.filter(status=Trajectory.Status.QUEUED).update(status=Trajectory.Status.SUCCEEDED)
    # An approval fuzzed through is undone, so the next one decides a pending action again.
    ActionRequest.objects.update(status=ActionRequest.Status.PENDING, decided_by=None, decided_at=None)


def _decided(world: dict[str, Any], note: str) -> None:
    assert ActionRequest.objects.values_list("status", "decision_note").get() == ("approved", note)


def _submit(client: Client, case: Case, world: dict[str, Any], data: dict[str, Any]) -> Any:
    url = case.url(world)
    if case.method == "get":
        return client.get(url, data)
    return client.post(url, data)


def _check(client: Client, case: Case, world: dict[str, Any], name: str, value: Any) -> None:
    raw = case.base(world)
    if value is MISSING:
        raw.pop(name, None)
    else:
        raw[name] = value
    prefix = case.prefix(world)
    data = {prefix + k: v for k, v in raw.items()}
    query = QueryDict(mutable=True)
    for k, v in data.items():
        query.setlist(k, v if isinstance(v, list) else [v])
    expected = case.build(world, query)
    valid = expected.is_valid()
    before = case.snapshot(world)
    response = _submit(client, case, world, data)
    assert response.status_code != 500
    if valid:
        assert response.status_code in case.accepted, (name, value, response.status_code, expected.errors)
        if case.stored is not None:
            case.stored(world, expected, response)
    else:
        assert response.status_code == 400, (name, value, response.status_code)
        assert case.snapshot(world) == before, "a refused form changed the database"
        body = response.content.decode()
        for bad in expected.errors:
            if bad == "__all__":
                assert 'class="errors" role="alert"' in body
            else:
                assert f'data-field-errors="{bad}"' in body, (name, value, bad, expected.errors)
    _after(case)


def test_every_form_is_fuzzed() -> None:
    assert {case.form for case in CASES} == set(ALL_FORMS)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.form.__name__)
def test_hostile_values_get_a_field_message_never_a_500(case: Case, as_role, world) -> None:
    client = as_role(case.role)
    names = _field_names(case.form)

    @settings(max_examples=45, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(name=st.sampled_from(names), value=VALUE)
    def fuzz(name: str, value: Any) -> None:
        _check(client, case, world, name, value)

    fuzz()


KNOWN_BAD = [
    (ApiKeyCreateForm, "rpm_limit", "99999999999999999999"),  # was an OverflowError, a 500
    (ApiKeyEditForm, "rpm_limit", "2147483648"),  # one past PostgreSQL's integer
    (ApiKeyEditForm, "budget_usd", "100000000"),  # one past the money column
    (CallFilterForm, "until", "2000-01-01T00:00"),  # before "from": named next to "to", not __all__
    (IncidentOpenForm, "case", "test_ask_holmes/no_such_case"),  # was accepted
    (TaskProfileForm, "verifier", '{"kind": "regex", "pattern": "("}'),
    (VerifierTryForm, "request", "[" * 500),
    (RediagnoseForm, "mode", "everything"),
    (ActionDecisionForm, "note", "a\x00b"),  # was replaced by U+FFFD and approved
    (McpServerForm, "url", "http://169.254.169.254/latest/meta-data"),  # the URL policy, next to the field
    (McpServerEditForm, "secret_env", "Authorization=Bearer sk-a-value-not-a-name"),
]


def test_known_bad_values_are_field_errors(as_role, world) -> None:
    assert {form for form, _, _ in KNOWN_BAD} == set(ALL_FORMS)
    for case_form, name, value in KNOWN_BAD:
        case = next(c for c in CASES if c.form is case_form)
        raw = {**case.base(world), name: value}
        if case_form is CallFilterForm:
            raw["since"] = "2020-01-01T00:00"
        prefix = case.prefix(world)
        response = _submit(as_role(case.role), case, world, {prefix + k: v for k, v in raw.items()})
        body = response.content.decode()
        assert response.status_code == 400, (case_form.__name__, name, response.status_code)
        assert f'data-field-errors="{name}"' in body, (case_form.__name__, name)
        assert str(settings_module.BASE_DIR) not in body  # no server path in a message


def _bounded(name: str, field_: forms.Field) -> list[str]:
    problems = []
    if isinstance(field_, forms.IntegerField | forms.FloatField | forms.DecimalField):
        if field_.min_value is None or field_.max_value is None:
            problems.append(f"{name}: a number with no range")
    elif isinstance(field_, forms.CharField) and field_.max_length is None:
        problems.append(f"{name}: a text with no length limit")
    return problems


def test_every_field_is_bounded() -> None:
    problems = [
        problem
        for form in ALL_FORMS
        for name, field_ in form.base_fields.items()
        for problem in _bounded(f"{form.__name__}.{name}", field_)
    ]
    assert problems == []
