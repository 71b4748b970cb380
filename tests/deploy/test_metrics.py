"""/metrics: scraped over HTTP and parsed with prometheus-client's own parser; the call metrics the
gateway records, the state gauges read from the database, multiprocess mode across real processes, and
the cost of ``observe_call`` on the hot path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from celery import current_app
from django.test import Client
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from diagnostics.models import Trajectory
from routing.call import metrics as calls
from routing.call.metrics import CallMetrics, observe_call
from routing.models import ProfileDrift
from tests.deploy.manifests import ROOT
from tests.factories import (
    AdapterFactory,
    ApiKeyFactory,
    BudgetLeaseFactory,
    RouterVersionFactory,
    TaskProfileFactory,
    TrainingRunFactory,
    TrajectoryFactory,
)
from training.models import Adapter, TrainingRun

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(client: Client, **headers: str) -> Samples:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse(response.content.decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


CALL = {"endpoint": "/v1/chat/completions", "profile": "tool-args", "route": "student"}


@pytest.mark.django_db
def test_a_scrape_carries_the_calls_the_gateway_observed(client: Client) -> None:
    labels = {**CALL, "backend": "teacher-a", "verdict": "pass"}
    before = scrape(client)
    observe_call(
        **labels, status=200, latency_s=0.8, overhead_s=0.002, fallback=True, cost_usd=Decimal("0.003")
    )
    observe_call(**labels, status=200, latency_s=0.05, overhead_s=0.0004, fallback=False, cost_usd=0.001)
    after = scrape(client)

    def delta(name: str, **extra: str) -> float:
        return value(after, name, **extra) - value(before, name, **extra)

    assert delta("skillgate_calls_total", **labels, code="2xx") == 2
    assert delta("skillgate_call_latency_seconds_count", **labels) == 2
    assert delta("skillgate_call_latency_seconds_sum", **labels) == pytest.approx(0.85)
    assert delta("skillgate_call_latency_seconds_bucket", **labels, le="0.1") == 1
    assert delta("skillgate_call_latency_seconds_bucket", **labels, le="1.0") == 2
    assert delta("skillgate_call_overhead_seconds_bucket", **CALL, le="0.0005") == 1
    assert delta("skillgate_call_overhead_seconds_count", **CALL) == 2
    assert delta("skillgate_fallbacks_total", endpoint=CALL["endpoint"], profile="tool-args") == 1
    assert delta("skillgate_spend_usd_total", profile="tool-args", route="student", backend="teacher-a") == (
        pytest.approx(0.004)
    )


def test_label_sets_past_the_cap_are_counted_as_other() -> None:
    registry = CollectorRegistry()
    metrics = CallMetrics(registry, max_label_sets=2, background=False)
    for profile in ("a", "b", "c", "d", "c"):
        metrics.observe(
            **{**CALL, "profile": profile},
            backend="s",
            verdict="fail",
            status=502,
            latency_s=1.0,
            overhead_s=0.001,
            fallback=False,
            cost_usd=0,
        )
    assert parse(generate_latest(registry).decode()).get(("skillgate_calls_total", frozenset())) is None
    assert metrics.flush() == 5
    samples = parse(generate_latest(registry).decode())
    other = dict.fromkeys(("endpoint", "profile", "route", "backend", "verdict"), calls.OTHER)
    assert value(samples, "skillgate_calls_total", **other, code="5xx") == 3
    assert (
        value(
            samples,
            "skillgate_calls_total",
            **{**CALL, "profile": "a"},
            backend="s",
            verdict="fail",
            code="5xx",
        )
        == 1
    )
    assert value(samples, "skillgate_call_label_sets_overflow_total") == 3
    assert not [k for k in samples if ("profile", "c") in k[1]]


@pytest.mark.django_db
def test_the_state_gauges_read_budgets_leases_jobs_and_adapters(client: Client) -> None:
    key = ApiKeyFactory(
        name="team-a", budget_usd=Decimal("5"), spent_usd=Decimal("1.25"), reserved_usd=Decimal("0.5")
    )
    ApiKeyFactory(name="unlimited", budget_usd=None)
    BudgetLeaseFactory(api_key=key, amount_usd=Decimal("0.5"), spent_usd=Decimal("0.2"))
    BudgetLeaseFactory(api_key=key, expires_at=timezone.now() - timedelta(minutes=5))
    profile = TaskProfileFactory(name="sql")
    active = AdapterFactory(profile=profile, status=Adapter.Status.ACTIVE, loaded_at=timezone.now())
    AdapterFactory(profile=profile, status=Adapter.Status.RETIRED)
    run = TrainingRunFactory(
        adapter=AdapterFactory(profile=profile),
        kind=TrainingRun.Kind.SFT_GRPO,
        status=TrainingRun.Status.RUNNING,
        step=30,
        total_steps=120,
        progress=[
            {"step": 10, "loss": 2.5},
            {"step": 30, "loss": 1.75, "reward": 0.4},
            {"step": 31, "phase": "grpo"},
        ],
    )
    TrainingRunFactory(status=TrainingRun.Status.SUCCEEDED)
    TrajectoryFactory(status=Trajectory.Status.RUNNING)

    samples = scrape(client)
    who = f"team-a ({key.prefix})"
    assert value(samples, "skillgate_key_budget_usd", key=who) == 5
    assert value(samples, "skillgate_key_spent_usd", key=who) == 1.25
    assert value(samples, "skillgate_key_reserved_usd", key=who) == 0.5
    assert not [k for k in samples if k[0] == "skillgate_key_budget_usd" and "unlimited" in str(k[1])]
    assert value(samples, "skillgate_budget_leases", state="live") == 1
    assert value(samples, "skillgate_budget_leases", state="expired") == 1
    assert value(samples, "skillgate_budget_lease_held_usd", key=who) == pytest.approx(0.3)
    labels = {"run": str(run.pk), "adapter": run.adapter.name, "kind": "sft_grpo"}
    assert value(samples, "skillgate_training_step", **labels) == 30
    assert value(samples, "skillgate_training_total_steps", **labels) == 120
    assert value(samples, "skillgate_training_loss", **labels) == 1.75
    assert value(samples, "skillgate_training_reward", **labels) == 0.4
    assert value(samples, "skillgate_training_runs", kind="sft_grpo", status="running") == 1
    assert value(samples, "skillgate_training_runs", kind="sft", status="succeeded") == 1
    assert (
        "skillgate_training_runs",
        frozenset({"kind": "grpo", "status": "failed"}.items()),
    ) in samples  # zeros too
    assert value(samples, "skillgate_trajectories", status="running") == 1
    assert value(samples, "skillgate_adapters", profile="sql", status="active") == 1
    assert value(samples, "skillgate_adapters", profile="sql", status="candidate") == 1
    assert value(samples, "skillgate_adapter_loaded", profile="sql", adapter=active.name) == 1
    assert value(samples, "skillgate_collector_up", collector="database") == 1


@pytest.mark.django_db
def test_the_router_drift_gauge_is_1_for_a_flagged_active_version(client: Client) -> None:
    for name, flag in (("drifting", True), ("steady", False)):
        RouterVersionFactory(
            profile=TaskProfileFactory(name=name), number=1, status="active", drift_flag=flag, threshold=0.5
        )
    samples = scrape(client)
    assert value(samples, "skillgate_router_drift", profile="drifting") == 1
    assert ("skillgate_router_drift", frozenset({("profile", "steady")})) in samples
    assert value(samples, "skillgate_router_drift", profile="steady") == 0


@pytest.mark.django_db
def test_the_router_drift_gauge_is_1_for_a_drifting_fallback(client: Client) -> None:
    """A profile no version routes: its fixed fallback's drift watch (issue 38)."""
    refused = TaskProfileFactory.create(name="refused")
    watched = TaskProfileFactory.create(name="watched")
    ProfileDrift.objects.create(profile=refused, flag=True, reason="cost per call")
    ProfileDrift.objects.create(profile=watched, flag=False)
    samples = scrape(client)
    assert value(samples, "skillgate_router_drift", profile="refused") == 1
    assert value(samples, "skillgate_router_drift", profile="watched") == 0


def test_queue_depth_counts_the_messages_waiting_on_the_broker(client: Client, settings: object) -> None:
    queue = f"dep-metrics-{os.getpid()}"
    settings.SKILLGATE = {**settings.SKILLGATE, "CYCLE": {**settings.SKILLGATE["CYCLE"], "QUEUE": queue}}  # type: ignore[attr-defined]
    with current_app.connection_for_write() as conn:
        try:
            for _ in range(3):
                current_app.send_task("training.tasks.cycle.cycles_poll", queue=queue, connection=conn)
            samples = scrape(client)
        finally:
            conn.default_channel.queue_purge(queue)
    assert value(samples, "skillgate_collector_up", collector="broker") == 1
    assert value(samples, "skillgate_queue_depth", queue=queue) == 3


@pytest.mark.django_db
def test_an_unreachable_broker_is_reported_and_the_scrape_still_answers(
    client: Client, settings: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.observability import views
    from app.observability.state import QueueDepthCollector

    monkeypatch.setattr(views, "QueueDepthCollector", lambda: QueueDepthCollector("redis://127.0.0.1:9/0"))
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "METRICS": {**settings.SKILLGATE["METRICS"], "BROKER_TIMEOUT_S": 0.5},
    }  # type: ignore[attr-defined]
    samples = scrape(client)
    assert value(samples, "skillgate_collector_up", collector="broker") == 0
    assert value(samples, "skillgate_collector_up", collector="database") == 1
    assert not [k for k in samples if k[0] == "skillgate_queue_depth"]


@pytest.mark.django_db
def test_the_token_guards_metrics_when_set_and_off_means_404(client: Client, settings: object) -> None:
    metrics_conf = settings.SKILLGATE["METRICS"]  # type: ignore[attr-defined]
    settings.SKILLGATE = {**settings.SKILLGATE, "METRICS": {**metrics_conf, "TOKEN": "s3cret"}}  # type: ignore[attr-defined]
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Basic s3cret"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret\u00e9"}).status_code == 401
    assert scrape(client, Authorization="Bearer s3cret")
    assert client.post("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 405
    settings.SKILLGATE = {**settings.SKILLGATE, "METRICS": {**metrics_conf, "ENABLED": False}}  # type: ignore[attr-defined]
    off = client.get("/metrics")
    assert off.status_code == 404 and off["Content-Type"].startswith("text/plain")


_WRITER = """
import sys
from routing.call.metrics import observe_call
for _ in range(int(sys.argv[1])):
    observe_call(endpoint="/v1/messages", profile="mp", route="teacher", backend="t", verdict="unverified",
                 status=200, latency_s=0.3, overhead_s=0.001, fallback=False, cost_usd=0.01)
"""


@pytest.mark.django_db
def test_multiprocess_mode_sums_the_calls_of_every_process(
    client: Client, settings: object, tmp_path: Path
) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "app.settings"}
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(n)], cwd=ROOT, env=env) for n in (3, 4)]
    assert [w.wait(120) for w in writers] == [0, 0]
    assert len(list(tmp_path.glob("counter_*.db"))) == 2  # one file per process
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "METRICS": {**settings.SKILLGATE["METRICS"], "MULTIPROC_DIR": str(tmp_path)},
    }  # type: ignore[attr-defined]
    samples = scrape(client)
    labels = {
        "endpoint": "/v1/messages",
        "profile": "mp",
        "route": "teacher",
        "backend": "t",
        "verdict": "unverified",
    }
    assert value(samples, "skillgate_calls_total", **labels, code="2xx") == 7
    assert value(samples, "skillgate_call_latency_seconds_count", **labels) == 7
    assert value(
        samples, "skillgate_spend_usd_total", profile="mp", route="teacher", backend="t"
    ) == pytest.approx(0.07)
    assert value(samples, "skillgate_collector_up", collector="database") == 1  # the state is there too


def test_observe_call_only_queues_on_the_request_path_and_the_flush_applies_every_call() -> None:
    """Counted, not timed (a loaded machine moves timings): ``observe`` touches no series, it appends one
    entry; ``flush`` applies them all. bench/gateway_overhead measures what that costs."""
    metrics = CallMetrics(CollectorRegistry(), background=False)
    args = {**CALL, "backend": "s", "verdict": "pass", "status": 200, "latency_s": 0.2, "overhead_s": 0.001}
    for _ in range(14000):
        metrics.observe(**args, fallback=False, cost_usd=0.0001)
    labels = {**CALL, "backend": "s", "verdict": "pass", "code": "2xx"}
    assert len(metrics._pending) == 14000
    assert value(parse(generate_latest(metrics.calls).decode()), "skillgate_calls_total", **labels) == 0
    assert metrics.flush() == 14000 and not metrics._pending
    samples = parse(generate_latest(metrics.calls).decode())
    assert value(samples, "skillgate_calls_total", **labels) == 14000


@pytest.mark.django_db
def test_every_series_the_grafana_dashboard_queries_is_exposed(client: Client) -> None:
    import re

    dashboard = json.loads((ROOT / "infra" / "grafana" / "skillgate.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bskillgate_[a-z_]+", target["expr"])
    }
    TrainingRunFactory(status=TrainingRun.Status.RUNNING, progress=[{"step": 1, "loss": 1.0, "reward": 0.5}])
    ApiKeyFactory(budget_usd=Decimal("1"))
    BudgetLeaseFactory()
    AdapterFactory(status=Adapter.Status.ACTIVE)
    observe_call(**CALL, backend="b", verdict="pass", status=200, latency_s=0.1, overhead_s=0.001)
    exposed = {name for name, _ in scrape(client)}
    assert len(queried) > 15
    assert sorted(queried - exposed) == []
