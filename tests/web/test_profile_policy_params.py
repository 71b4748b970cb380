"""Issue 41, the console's hostile pass: a task profile's policy parameters (JSON on the Profiles page)
are read by the gateway on every call of the profile. Parameters it cannot use (a threshold that is a
word, a scale of 0, a sampling rate of 7, a fallback that is no fixed policy) were saved, and then every
call of that profile was a 500. Now each is a message next to the field and nothing is saved; whatever
the form accepts, the gateway's readers of those parameters use without failing (Hypothesis); and a
profile saved on the page serves calls through the running server."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.web.forms import TaskProfileForm
from routing.call.sampling import rates
from routing.models import TaskProfile
from routing.protocol import ChatRequest
from routing.router.policies import Call, build_router, fixed_fallback
from routing.router.versions.config import profile_target
from tests.factories import TaskProfileFactory, make_key

BASE = {"policy": "threshold", "verifier_max_timeout_s": "10", "verifier_max_memory_mb": "512"}
HOSTILE: list[tuple[str, dict[str, Any]]] = [
    ("threshold", {"threshold": "high"}),
    ("threshold", {"threshold": 1.5}),
    ("threshold", {"threshold": True}),
    ("threshold", {"scale": 0}),
    ("threshold", {"scale": "big"}),
    ("threshold", {"scale": -4000}),
    ("student_with_fallback", {"teacher_sample_rate": "often"}),
    ("student_with_fallback", {"teacher_sample_rate": 7}),
    ("student_with_fallback", {"student_sample_rate": -0.1}),
    ("always_teacher", {"sample_daily_usd": -5}),
    ("learned", {"fallback": "nope"}),
    ("learned", {"fallback": "learned"}),
    ("learned", {"fallback": "threshold", "fallback_params": {"threshold": 2}}),
    ("learned", {"fallback": "threshold", "fallback_params": [1]}),
    ("learned", {"max_p95_ms": "fast"}),
    ("learned", {"target_relative": "yes"}),
]
KNOWN = [
    "threshold",
    "scale",
    "fallback",
    "fallback_params",
    "max_p95_ms",
    "target_relative",
    "teacher_sample_rate",
    "student_sample_rate",
    "sample_daily_usd",
    "other",
]
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["", "x", "0.5", "threshold", "learned", "always_teacher"]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(KNOWN), inner, max_size=2),
    max_leaves=4,
)
PARAMS = st.dictionaries(st.sampled_from(KNOWN), JSON, max_size=4)


def _form(policy: str, params: dict[str, Any], name: str = "hostile") -> dict[str, str]:
    return {**BASE, "name": name, "policy": policy, "policy_params": json.dumps(params)}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("policy", "params"), HOSTILE, ids=lambda v: json.dumps(v) if isinstance(v, dict) else v
)
def test_parameters_the_gateway_cannot_use_are_a_field_message_and_never_saved(
    as_role: Any, policy: str, params: dict[str, Any]
) -> None:
    client: Client = as_role("admin")
    created = client.post("/profiles/", _form(policy, params))
    body = created.content.decode()
    assert created.status_code == 400 and 'data-field-errors="policy_params"' in body, body[-600:]
    assert "The gateway could not use these parameters" in body
    assert not TaskProfile.objects.filter(name="hostile").exists()

    existing = TaskProfileFactory.create(name="kept", policy="always_teacher", policy_params={"x": 1})
    edited = client.post(f"/profiles/{existing.pk}/", _form(policy, params, name="kept"))
    assert edited.status_code == 400 and 'data-field-errors="policy_params"' in edited.content.decode()
    existing.refresh_from_db()
    assert (existing.policy, existing.policy_params) == ("always_teacher", {"x": 1})


def _readers(profile: TaskProfile) -> None:
    """What the gateway reads of a profile's parameters on its calls (none may raise)."""
    request = ChatRequest.model_validate({"model": "auto", "messages": [{"role": "user", "content": "hi"}]})
    if profile.policy == TaskProfile.Policy.LEARNED:
        for has_verifier in (True, False):
            fallback = fixed_fallback(profile, has_verifier)
            fallback.route(Call(request, profile, has_verifier))
        profile_target(profile)
    else:
        build_router(profile).route(Call(request, profile, True))
    rates(profile)


@pytest.mark.django_db
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(policy=st.sampled_from(TaskProfile.Policy.values), params=PARAMS)
def test_whatever_the_form_accepts_the_gateway_can_use(policy: str, params: dict[str, Any]) -> None:
    form = TaskProfileForm(_form(policy, params, name="fuzzed"))
    if not form.is_valid():
        assert "policy_params" in form.errors or set(form.errors) <= {"target"}, form.errors
        return
    fields = form.profile_fields()
    _readers(TaskProfile(name="fuzzed", policy=fields["policy"], policy_params=fields["policy_params"]))


@pytest.mark.django_db(transaction=True)
def test_a_profile_saved_on_the_page_serves_calls_through_the_running_server(
    gateway_url: str, backends: Any, as_role: Any
) -> None:
    client: Client = as_role("admin")
    refused = client.post("/profiles/", _form("threshold", {"scale": 0}, name="sized"))
    assert refused.status_code == 400 and not TaskProfile.objects.filter(name="sized").exists()
    saved = client.post("/profiles/", _form("threshold", {"scale": 4000, "threshold": 0.2}, name="sized"))
    assert saved.status_code == 302, saved.content.decode()[-600:]
    key = make_key(name="caller")
    answer = httpx2.post(
        gateway_url + "/v1/chat/completions",
        json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {key.raw}", "X-Skillgate-Task": "sized"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-skillgate-route"] in ("student", "teacher")
