"""The student on several vLLM replicas (local vLLM-like stubs, tests/support/vllm_stub.py): calls
balanced across the replicas that serve the adapter, the adapter health check reloading what a restart
lost, its alarm (log, dashboard partial, gauge), and legs that found their adapter missing counted
apart from ordinary fallbacks."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.template.loader import render_to_string
from django.utils import timezone

from app.observability.replicas import StudentReplicaCollector
from bench.support.vllm import free_port
from routing.call import replicas
from routing.errors import UpstreamError
from routing.models import Backend, Invocation, TaskProfile, validate_replica_urls
from tests.factories import AdapterFactory, TaskProfileFactory
from tests.support.gateway import client
from tests.support.vllm_stub import VllmStub
from tests.support.wait import wait_until
from training import adapter_health
from training.deploy import DeployError, adapter_load
from training.models import Adapter

pytestmark = pytest.mark.django_db(transaction=True)

ADAPTER = "rep-v1"
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(autouse=True)
def _fresh_replicas() -> Iterator[None]:
    replicas.forget()
    yield
    replicas.forget()


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Health checks the gateway asks for, run at once (as a worker would): each backend id is recorded
    once its check has written the status, so a test that waits for it sees the check's outcome."""
    asked: list[int] = []

    def run(backend_id: int | None) -> None:
        assert backend_id is not None
        adapter_health.check_backend(backend_id)
        asked.append(backend_id)

    monkeypatch.setattr(replicas, "_send_check", run)
    return asked


@pytest.fixture
def pair() -> Iterator[tuple[VllmStub, VllmStub]]:
    with VllmStub() as one, VllmStub() as two:
        yield one, two


def _student(backends: dict[str, Backend], urls: list[str]) -> Backend:
    student = backends["student"]
    Backend.objects.filter(pk=student.pk).update(
        model="hosted_vllm/tiny-base", api_base=urls[0], replicas=urls
    )
    student.refresh_from_db()
    return student


@pytest.fixture
def profile(backends: dict[str, Backend], pair: tuple[VllmStub, VllmStub]) -> TaskProfile:
    _student(backends, [pair[0].base_url, pair[1].base_url])
    profile = TaskProfileFactory.create(name="rep", student_adapter=ADAPTER)
    AdapterFactory.create(
        profile=profile, name=ADAPTER, path="/adapters/rep-v1", status=Adapter.Status.ACTIVE
    )
    return profile


def _call(gateway_url: str, key: str, **kwargs: Any) -> Any:
    return client(gateway_url, key).chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES, metadata={"task": "rep"}, **kwargs
    )


def _chats(stub: VllmStub) -> list[str]:
    return [str(body["model"]) for body in stub.requests]


def test_calls_are_balanced_across_the_replicas(gateway_url, api_key, profile, pair, stub):
    one, two = pair
    status = adapter_health.check_backend(profile.student_id or Backend.objects.get(name="student").pk)
    assert one.loaded == {ADAPTER: "/adapters/rep-v1"} and two.loaded == one.loaded
    assert all(
        entry["up"] and ADAPTER in entry["adapters"] and not entry["missing"] for entry in status.values()
    )

    for i in range(8):
        raw = _call(gateway_url, api_key.raw, stream=i % 2 == 1)
        assert raw.headers["x-skillgate-served-by"] == "student"
        if i % 2:
            assert "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices).strip() == "ok"
    assert _chats(one) == [ADAPTER] * 4 and _chats(two) == [ADAPTER] * 4
    assert stub.requests == []  # the teacher was never asked
    # Every call, whole or streamed, gave its replica back.
    assert all(state.in_flight == 0 for state in replicas._replicas.values())


def test_a_replica_that_cannot_load_the_adapter_gets_no_calls_and_alarms(
    gateway_url, api_key, profile, pair, stub, caplog
):
    one, two = pair
    two.load_status = 500
    student = Backend.objects.get(name="student")
    with caplog.at_level(logging.ERROR, logger="training.adapter_health"):
        status = adapter_health.check_backend(student.pk)
    assert status[two.base_url]["missing"] == [ADAPTER] and status[two.base_url]["failing_since"]
    assert "cannot load" in status[two.base_url]["error"]
    assert any("ALARM" in r.message and two.base_url in r.message for r in caplog.records)

    for _ in range(6):
        assert _call(gateway_url, api_key.raw).headers["x-skillgate-served-by"] == "student"
    assert _chats(one) == [ADAPTER] * 6 and _chats(two) == []

    since = timezone.now() - timedelta(hours=1)
    html = render_to_string(
        "web/_student_health.html", {"student_health": adapter_health.dashboard(since=since)}
    )
    assert "data-student-alarm" in html and "missing adapter" in html and two.base_url in html

    gauges = {m.name: m for m in StudentReplicaCollector().collect()}
    served = {
        (s.labels["replica"], s.labels["adapter"]): s.value
        for s in gauges["skillgate_student_adapter_status"].samples
    }
    assert served == {(one.base_url, ADAPTER): 1.0, (two.base_url, ADAPTER): 0.0}
    failing = {
        s.labels["replica"]: s.value for s in gauges["skillgate_student_replica_failing_seconds"].samples
    }
    assert failing[one.base_url] == 0.0 and failing[two.base_url] >= 0.0

    # Once it can load again, the next check clears the alarm and the replica takes calls again.
    two.load_status = 200
    status = adapter_health.check_backend(student.pk)
    assert status[two.base_url]["failing_since"] is None and status[two.base_url]["reloaded"] == [ADAPTER]
    for _ in range(4):
        _call(gateway_url, api_key.raw)
    assert len(_chats(two)) == 2
    html = render_to_string(
        "web/_student_health.html", {"student_health": adapter_health.dashboard(since=since)}
    )
    assert "data-student-alarm" not in html


def test_a_restarted_replica_gets_its_adapter_back_from_the_health_check(profile, pair):
    one, two = pair
    student = Backend.objects.get(name="student")
    adapter_health.check_backend(student.pk)
    two.restart()
    assert two.loaded == {}
    status = adapter_health.check_backend(student.pk)
    assert two.loaded == {ADAPTER: "/adapters/rep-v1"}
    assert status[two.base_url]["reloaded"] == [ADAPTER] and status[one.base_url]["reloaded"] == []
    assert one.loads == [ADAPTER] and two.loads == [ADAPTER, ADAPTER]
    # Nothing to do the next time: idempotent.
    adapter_health.check_backend(student.pk)
    assert one.loads == [ADAPTER] and two.loads == [ADAPTER, ADAPTER]


def test_a_leg_whose_adapter_is_missing_is_counted_and_asks_for_a_check(
    gateway_url, api_key, profile, pair, stub, checks
):
    one, two = pair
    student = Backend.objects.get(name="student")
    adapter_health.check_backend(student.pk)
    one.restart()  # the status still says it serves the adapter
    served = [_call(gateway_url, api_key.raw).headers["x-skillgate-served-by"] for _ in range(2)]
    assert sorted(served) == ["student", "teacher"]  # one call met the restarted replica
    wait_until(lambda: checks == [student.pk], timeout=10, what="the check to reload the adapter")
    assert ADAPTER in one.loaded

    fallback = Invocation.objects.get(fallback=True)
    leg = fallback.legs[0]
    assert (
        leg["role"] == "student"
        and leg["error"].startswith("adapter missing:")
        and one.base_url in leg["error"]
    )
    assert replicas.leg_adapter_missing(leg)
    assert adapter_health.adapter_missing_legs(timezone.now() - timedelta(hours=1)) == 1

    # Reloaded and checked after the miss: both replicas serve again.
    for _ in range(4):
        assert _call(gateway_url, api_key.raw).headers["x-skillgate-served-by"] == "student"
    assert _chats(one).count(ADAPTER) == 3 and len(_chats(two)) == 3
    since = timezone.now() - timedelta(hours=1)
    html = render_to_string(
        "web/_student_health.html", {"student_health": adapter_health.dashboard(since=since)}
    )
    assert '<span data-stat="adapter-missing">1</span>' in html


def test_when_no_replica_serves_the_adapter_the_leg_fails_at_once(
    gateway_url, api_key, profile, pair, stub, checks
):
    one, two = pair
    one.load_status = two.load_status = 500
    student = Backend.objects.get(name="student")
    adapter_health.check_backend(student.pk)
    checks.clear()
    raw = _call(gateway_url, api_key.raw)
    assert raw.headers["x-skillgate-served-by"] == "teacher"
    assert _chats(one) == [] and _chats(two) == []  # no request sent to a replica known to lack it
    leg = Invocation.objects.get().legs[0]
    assert leg["error"].startswith("adapter missing: no replica")
    wait_until(lambda: checks == [student.pk], timeout=5, what="a check to be asked for")
    # A streamed call too: its student leg is recorded as such, and the teacher streams the answer.
    streamed = _call(gateway_url, api_key.raw, stream=True)
    assert streamed.headers["x-skillgate-served-by"] == "teacher"
    assert "".join(c.choices[0].delta.content or "" for c in streamed.parse() if c.choices).strip() == "ok"
    assert adapter_health.adapter_missing_legs(timezone.now() - timedelta(hours=1)) == 2


def test_an_unreachable_replica_is_skipped_after_its_first_failure(
    gateway_url, api_key, backends, pair, stub, caplog
):
    one, _ = pair
    dead = f"http://127.0.0.1:{free_port()}/v1"
    student = _student(backends, [dead, one.base_url])
    TaskProfileFactory.create(name="rep")  # the base model: no adapter needed
    routes = [_call(gateway_url, api_key.raw).headers["x-skillgate-served-by"] for _ in range(6)]
    assert routes.count("teacher") <= 1 and routes.count("student") >= 5
    assert len(_chats(one)) == routes.count("student")
    errors = [leg["error"] for row in Invocation.objects.all() for leg in row.legs if leg["error"]]
    assert all(not error.startswith("adapter missing") for error in errors)

    with caplog.at_level(logging.ERROR, logger="training.adapter_health"):
        status = adapter_health.check_backend(student.pk)
    assert status[dead]["up"] is False and status[one.base_url]["up"] is True
    assert any("ALARM" in r.message and "unreachable" in r.message for r in caplog.records)
    html = render_to_string(
        "web/_student_health.html", {"student_health": adapter_health.dashboard(since=timezone.now())}
    )
    assert ">down<" in html


def test_adapter_load_loads_every_replica_and_records_each(profile, pair):
    one, two = pair
    candidate = AdapterFactory.create(profile=profile, name="rep-v2", path="/adapters/rep-v2")
    two.load_status = 500
    adapter_load(adapter_id=candidate.pk)
    assert "rep-v2" in one.loaded and "rep-v2" not in two.loaded
    status = Backend.objects.get(name="student").replica_status
    assert "rep-v2" in status[one.base_url]["adapters"] and status[two.base_url]["missing"] == ["rep-v2"]
    one.load_status = 500
    with pytest.raises(DeployError):
        adapter_load(adapter_id=AdapterFactory.create(profile=profile, name="rep-v3").pk)


@pytest.mark.parametrize(
    "value",
    [
        "http://a/v1",
        ["ftp://a/v1"],
        ["http://a/v1", "http://a/v1/"],
        [1],
        ["javascript:alert(1)"],
        ["http://user:secret@a/v1"],
        ["http://a/v1?x=1"],
        ["http://a:99999/v1"],
        ["http:///v1"],
        ["http://a b/v1"],
        ["http://a/v1"] * 65,
    ],
)
def test_replica_lists_are_checked(value):
    with pytest.raises(ValidationError):
        validate_replica_urls(value)
    validate_replica_urls(
        [
            "http://student-0:8000/v1",  # a Kubernetes short name
            "dns+http://skillgate-student-headless:8000/v1",
            "https://10.0.0.2:8000/v1",
            "http://[::1]:8000/v1",
        ]
    )


def test_a_missing_mark_expires_without_a_check(backends, pair, monkeypatch):
    """Without beat nor worker, a replica once found missing the adapter is tried again later."""
    one, two = pair
    student = _student(backends, [one.base_url, two.base_url])
    student.adapter = ADAPTER
    monkeypatch.setattr(replicas, "_send_check", lambda backend_id: None)

    def picked() -> set[str]:
        urls = set()
        for _ in range(4):
            chosen = replicas.pick(student)
            chosen.release()
            urls.add(chosen.url)
        return urls

    chosen = replicas.pick(student)

    replicas.failed(
        chosen, UpstreamError("The student backend 'student' failed (404): The model `x` does not exist.")
    )
    chosen.release()
    assert picked() == {one.base_url, two.base_url} - {chosen.url}
    monkeypatch.setattr(replicas, "MISSING_HOLD_S", 0.0)
    time.sleep(0.01)
    assert picked() == {one.base_url, two.base_url}


def test_replicas_behind_a_dns_name_are_found_by_the_check(gateway_url, api_key, backends, pair, stub):
    """``dns+``: every address of the name is a replica once a check has resolved it (here localhost's
    addresses; one the stub does not listen on is recorded down and skipped)."""
    one, _ = pair
    entry = f"dns+http://localhost:{one.port}/v1"
    student = _student(backends, [entry])
    assert replicas.endpoints(student) == [f"http://localhost:{one.port}/v1"]  # before any check: the name
    profile = TaskProfileFactory.create(name="rep", student_adapter=ADAPTER)
    AdapterFactory.create(
        profile=profile, name=ADAPTER, path="/adapters/rep-v1", status=Adapter.Status.ACTIVE
    )

    status = adapter_health.check_backend(student.pk)
    found = f"http://127.0.0.1:{one.port}/v1"
    assert status[found]["via"] == entry and status[found]["up"] and ADAPTER in one.loaded
    assert all(entry_["via"] == entry for entry_ in status.values())
    student.refresh_from_db()
    assert found in replicas.endpoints(student)
    for _ in range(3):
        assert _call(gateway_url, api_key.raw).headers["x-skillgate-served-by"] == "student"
    assert _chats(one) == [ADAPTER] * 3


def test_the_check_a_call_asks_for_is_the_celery_task_by_that_name():
    from training.tasks.adapter_health import student_health_check

    assert student_health_check.name == replicas.CHECK_TASK
