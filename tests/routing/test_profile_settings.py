"""Per-profile settings over the typed ones, through ``core.conf.resolve`` (one precedence), and the one
place a backend's provider key is read (``Backend.api_key``)."""

from __future__ import annotations

import json
from dataclasses import astuple
from decimal import Decimal

import pytest

from core.conf import Invalid
from routing import conf
from routing.call.plans import output_cap
from routing.call.sampling import rates
from routing.models import Backend, TaskProfile
from routing.protocol import parse_chat_request
from routing.router.versions.config import profile_target

LEARNED, FIXED = TaskProfile.Policy.LEARNED, TaskProfile.Policy.STUDENT_WITH_FALLBACK


def request(**fields: object) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


def test_a_backend_s_key_is_read_from_the_variable_it_names(monkeypatch):
    monkeypatch.setenv("SKILLGATE_TEST_PROVIDER_KEY", "sk-test")
    assert Backend(api_key_env="SKILLGATE_TEST_PROVIDER_KEY").api_key() == "sk-test"
    monkeypatch.setenv("SKILLGATE_TEST_PROVIDER_KEY", "")
    assert Backend(api_key_env="SKILLGATE_TEST_PROVIDER_KEY").api_key() is None
    monkeypatch.delenv("SKILLGATE_TEST_PROVIDER_KEY")
    assert Backend(api_key_env="SKILLGATE_TEST_PROVIDER_KEY").api_key() is None
    assert Backend(api_key_env="").api_key() is None


def test_the_output_cap_is_the_call_s_then_the_profile_s_then_the_setting(settings):
    settings.SKILLGATE = {**settings.SKILLGATE, "DEFAULT_MAX_TOKENS": 321}
    plain, capped = TaskProfile(max_tokens=None), TaskProfile(max_tokens=77)
    assert output_cap(plain, parse_chat_request(request())) == 321
    assert output_cap(capped, parse_chat_request(request())) == 77
    assert output_cap(capped, parse_chat_request(request(max_tokens=5))) == 5


def test_a_learned_profile_s_target_overrides_the_router_settings(settings):
    router = {**settings.SKILLGATE["ROUTER"], "TARGET": 0.97, "TARGET_RELATIVE": True, "TARGET_Z": 1.5}
    settings.SKILLGATE = {**settings.SKILLGATE, "ROUTER": router}
    assert astuple(profile_target(TaskProfile(policy=LEARNED))) == (0.97, True, None, 1.5)
    own = TaskProfile(
        policy=LEARNED, policy_params={"target": 0.9, "target_relative": None, "max_p95_ms": 800}
    )
    assert astuple(profile_target(own)) == (0.9, True, 800.0, 1.5)
    with pytest.raises(Invalid, match="target must be at most 1; got 2"):
        profile_target(TaskProfile(policy=LEARNED, policy_params={"target": 2}))


def test_sampling_rates_a_learned_profile_inherits_and_others_only_when_they_say_so(settings):
    router = {**settings.SKILLGATE["ROUTER"], "TEACHER_SAMPLE_RATE": 0.2, "STUDENT_SAMPLE_RATE": 0.1}
    settings.SKILLGATE = {**settings.SKILLGATE, "ROUTER": router}
    assert rates(TaskProfile(policy=LEARNED)) == (0.2, 0.1)
    assert rates(TaskProfile(policy=LEARNED, policy_params={"teacher_sample_rate": 0.5})) == (0.5, 0.1)
    assert rates(TaskProfile(policy=FIXED)) == (0.0, 0.0)
    assert rates(TaskProfile(policy=FIXED, policy_params={"student_sample_rate": 0.3})) == (0.0, 0.3)


def test_the_synced_backends_come_from_the_typed_settings():
    typed = conf.get()
    assert typed.backend("teacher") is typed.teacher and typed.backend("student") is typed.student
    assert typed.student.input_cost is None or isinstance(typed.student.input_cost, Decimal)
