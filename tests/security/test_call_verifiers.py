"""A task profile owns its verifier; a caller's own verifier is a permission, bounded, and never
training data unless its key is trusted.

Driven through the running server with the openai SDK. The attacks: send tests or a schema of one's
own to a profile that does not accept them, or from a key without the scope; ask for limits past the
profile's maxima; get answers judged by one's own lax verifier into the learning cycle; hold a
worker with a catastrophically backtracking pattern.
"""

from __future__ import annotations

import time

import openai
import pytest

from bench.support.openai_stub import Reply
from routing.models import Invocation, TaskProfile
from routing.verifiers import VerifierConfigError, build_verifier
from tests.factories import TaskProfileFactory, make_key
from tests.support.cycle import CITIES, city_prompt, drive, json_profile, responder
from training import selectors

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
LAX = {"kind": "json_schema", "schema": {}}  # passes any JSON value
CALLER_SCOPES = ["llm", "verifiers:call"]


def _client(gateway_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0, timeout=60)


def _call(gateway_url: str, key: str, profile: str, verifier: dict | None = None, **extra):  # type: ignore[no-untyped-def]
    metadata: dict = {"task": profile}
    if verifier is not None:
        metadata["verifier"] = verifier
    return _client(gateway_url, key).chat.completions.with_raw_response.create(
        model="auto",
        messages=HELLO,  # type: ignore[arg-type]
        extra_body={"metadata": metadata},
        **extra,
    )


def _refused(gateway_url: str, key: str, profile: str, verifier: dict) -> dict:
    with pytest.raises(openai.PermissionDeniedError) as refused:
        _call(gateway_url, key, profile, verifier)
    body = refused.value.body
    assert isinstance(body, dict) and body["type"] == "permission_error"
    assert body["param"] == "metadata.verifier"
    return body


def test_a_profile_that_owns_its_verifier_refuses_a_callers_own(gateway_url, backends, stub):
    TaskProfileFactory.create(name="owned", verifier={"kind": "regex", "pattern": "^ok$"})
    key = make_key(scopes=CALLER_SCOPES)  # even with the scope: the profile decides
    body = _refused(gateway_url, key.raw, "owned", {"kind": "regex", "pattern": ".*"})
    assert body["code"] == "call_verifier_not_allowed"
    assert stub.requests == [] and not Invocation.objects.exists()
    served = _call(gateway_url, key.raw, "owned")
    assert served.headers["x-skillgate-verdict"] == "pass"
    assert Invocation.objects.get().verifier_source == Invocation.VerifierSource.PROFILE


def test_a_key_without_the_scope_cannot_send_a_verifier(gateway_url, backends, api_key, stub):
    TaskProfileFactory.create(name="open", allow_call_verifier=True)
    body = _refused(gateway_url, api_key.raw, "open", {"kind": "python_tests", "test": "assert True"})
    assert body["code"] == "missing_scope" and "verifiers:call" in body["message"]
    assert stub.requests == [] and not Invocation.objects.exists()
    assert _call(gateway_url, api_key.raw, "open").headers["x-skillgate-verdict"] == "unverified"


def test_an_allowed_callers_verifier_judges_and_is_marked_on_the_ledger(gateway_url, backends, stub):
    TaskProfileFactory.create(name="open", allow_call_verifier=True)
    key = make_key(scopes=CALLER_SCOPES)
    served = _call(gateway_url, key.raw, "open", {"kind": "regex", "pattern": "^no$"})
    assert served.headers["x-skillgate-verdict"] == "fail"
    row = Invocation.objects.get()
    assert row.verifier_source == Invocation.VerifierSource.CALL


def test_a_response_schema_is_the_callers_verifier(gateway_url, backends, api_key, stub):
    """No profile verifier: the call's own json_schema response format checks it, marked as the caller's."""
    stub.responder = lambda body: Reply(content='{"a": 1}')
    TaskProfileFactory.create(name="plain")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    response_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    served = _call(gateway_url, api_key.raw, "plain", response_format=response_format)
    assert served.headers["x-skillgate-verdict"] == "pass"
    assert Invocation.objects.get().verifier_source == Invocation.VerifierSource.CALL


@pytest.mark.parametrize(("schema", "answer"), [(True, "[1, 2]"), ({}, '"text"'), (False, '{"a": 1}')])
def test_a_plain_key_cannot_pick_the_schema_of_a_profiles_json_schema_verifier(
    gateway_url, backends, api_key, stub, schema, answer
):
    """A profile verifier ``{"kind": "json_schema"}`` has no schema of its own: a key without
    ``verifiers:call`` sends ``true`` (or ``false``) as its response format's schema to choose its own
    verdict. The request's schema is not used: the answer must be a JSON object, whatever it says."""
    stub.responder = lambda body: Reply(content=answer)
    TaskProfileFactory.create(
        name="structured", verifier={"kind": "json_schema"}, policy=TaskProfile.Policy.ALWAYS_TEACHER
    )
    response_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    served = _call(gateway_url, api_key.raw, "structured", response_format=response_format)
    row = Invocation.objects.get()
    is_object = answer.startswith("{")
    assert served.headers["x-skillgate-verdict"] == ("pass" if is_object else "fail")
    assert row.verifier_source == Invocation.VerifierSource.PROFILE
    if is_object:
        assert "lacks the 'verifiers:call' scope" in row.verdict_detail
    trusted = make_key(name="scoped", scopes=CALLER_SCOPES)  # with the scope, its schema judges
    served = _call(gateway_url, trusted.raw, "structured", response_format=response_format)
    assert served.headers["x-skillgate-verdict"] == ("pass" if schema is not False else "fail")


def test_code_verifier_limits_are_clamped_to_the_profiles_maxima(gateway_url, backends, stub):
    """The caller asks for 300 s and 64 GiB; the profile's maxima (1 s, 256 MiB) hold."""
    TaskProfileFactory.create(
        name="code",
        policy=TaskProfile.Policy.ALWAYS_TEACHER,
        allow_call_verifier=True,
        verifier_max_timeout_s=1.0,
        verifier_max_memory_mb=256,
    )
    stub.responder = lambda body: Reply(content="```python\nwhile True:\n    pass\n```")
    key = make_key(scopes=CALLER_SCOPES)
    verifier = {"kind": "python_tests", "test": "assert True", "timeout_s": 300, "memory_mb": 65536}
    started = time.monotonic()
    served = _call(gateway_url, key.raw, "code", verifier)
    assert time.monotonic() - started < 15
    assert served.headers["x-skillgate-verdict"] == "fail"
    assert "timeout after 1s" in Invocation.objects.get().verdict_detail
    # The same bound holds for a memory bomb: it fails instead of taking the host's memory.
    stub.responder = lambda body: Reply(content="```python\nx = bytearray(1 << 30)\n```")
    assert _call(gateway_url, key.raw, "code", verifier).headers["x-skillgate-verdict"] == "fail"


def test_answers_judged_by_an_untrusted_callers_verifier_never_become_training_data(
    gateway_url, backends, stub, trusted_key
):
    """A lax per-call schema would pass the teacher's every answer; only a trusted key's count."""
    profile = json_profile(allow_call_verifier=True)
    stub.responder = responder(student="not json", teacher='"anything"')
    untrusted = make_key(scopes=CALLER_SCOPES)
    prompts = [city_prompt(*c) for c in CITIES[:2]]
    mine = drive(gateway_url, untrusted.raw, "extract", prompts, extra_body={"metadata": {"verifier": LAX}})
    theirs = drive(
        gateway_url, trusted_key.raw, "extract", prompts, extra_body={"metadata": {"verifier": LAX}}
    )
    assert all(c.verifier_source == "call" for c in mine + theirs)
    replayable = {c.pk for c in selectors.failed_student_calls(profile_id=profile.pk, sources=1)}
    assert replayable == {c.pk for c in theirs}


def test_a_backtracking_pattern_runs_in_linear_time():
    """RE2: ``(a+)+$`` on a long non-matching text answers at once instead of holding a worker."""
    verifier = build_verifier({"kind": "regex", "pattern": "(a+)+$"})
    started = time.monotonic()
    verdict = verifier.verify(request={}, message={"role": "assistant", "content": "a" * 100_000 + "!"})
    assert not verdict.passed and time.monotonic() - started < 0.5
    with pytest.raises(VerifierConfigError, match="RE2"):
        build_verifier({"kind": "regex", "pattern": r"(\w)\1"})
