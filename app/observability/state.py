"""Gauges of the service's current state, read from the database (and the broker) at each scrape.

Every web process answers with the same values (they come from the shared database): aggregate them
with ``max`` across instances, never ``sum``. A handful of aggregate queries per scrape; per-row series
only for what is bounded (API keys with a budget, running training runs, active adapters).

Series:
  skillgate_key_budget_usd{key}, skillgate_key_spent_usd{key}, skillgate_key_reserved_usd{key}
  skillgate_budget_leases{state}                  live / expired leases
  skillgate_budget_lease_held_usd{key}            unspent part of the live leases
  skillgate_training_runs{kind, status}, skillgate_cycles{status, stage}
  skillgate_trajectories{status}, skillgate_action_requests{status}, skillgate_incidents{status}
  skillgate_training_step{run, adapter, kind}, skillgate_training_total_steps{...}
  skillgate_training_loss{...}, skillgate_training_reward{...}     last reported value of a running run
  skillgate_adapters{profile, status}
  skillgate_adapter_loaded{profile, adapter}      1 when the active adapter was loaded into the student
  skillgate_queue_depth{queue}                    messages waiting on the broker
  skillgate_collector_up{collector}               0 when a source could not be read this scrape
  skillgate_ledger_unstorable_rows                rows written without their payload (alarm when > 0)
  skillgate_router_drift{profile}                 1 when the profile's active router version, or the fixed
                                                  fallback of a profile no version routes, is flagged for
                                                  drift (alarm when 1)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from celery import current_app
from django.conf import settings
from django.db.models import Count, F, Sum
from django.utils import timezone
from kombu.exceptions import ChannelError
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app import conf
from diagnostics import conf as diagnostics_conf
from diagnostics.models import ActionRequest, Incident, Trajectory
from routing.ledger import journal
from routing.models import ApiKey, BudgetLease, ProfileDrift, RouterVersion
from training import conf as training_conf
from training.models import Adapter, Cycle, TrainingRun

log = logging.getLogger(__name__)


def _gauge(name: str, documentation: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def _counts(
    family: GaugeMetricFamily,
    rows: Iterable[Mapping[str, Any]],
    fields: list[str],
    every: dict[str, list[str]],
) -> GaugeMetricFamily:
    """One sample per combination of ``every`` (choices of each field; zero when no row has it), so a
    state's series does not vanish when it empties."""
    seen = {tuple(str(row[f]) for f in fields): row["n"] for row in rows}
    combos: list[tuple[str, ...]] = [()]
    for field in fields:
        combos = [(*c, v) for c in combos for v in every[field]]
    for combo in sorted(set(combos) | set(seen)):
        family.add_metric(list(combo), float(seen.get(combo, 0)))
    return family


def _values(choices: Any) -> list[str]:
    return [str(value) for value in choices.values]


class DatabaseStateCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from self._keys()
        yield from self._jobs()
        yield from self._training()
        yield from self._adapters()
        yield from self._ledger()
        yield from self._router()

    def _router(self) -> Iterator[Metric]:
        drift = _gauge(
            "skillgate_router_drift",
            "1 when the profile's active learned-router version is flagged for drift (its safe fixed policy "
            "serves, a retrain is queued).",
            ["profile"],
        )
        active = RouterVersion.objects.filter(status=RouterVersion.Status.ACTIVE)
        flags = dict(active.values_list("profile__name", "drift_flag"))
        # profiles no version routes: their fallback's drift watch (routing/router/versions/profile_drift.py)
        for profile, flag in ProfileDrift.objects.values_list("profile__name", "flag"):
            flags[profile] = flags.get(profile, False) or flag
        for profile, flag in flags.items():
            drift.add_metric([profile], 1.0 if flag else 0.0)
        yield drift

    def _ledger(self) -> Iterator[Metric]:
        unstorable = _gauge(
            "skillgate_ledger_unstorable_rows",
            "Calls whose ledger row the database refused whole (written without payload; alarm on > 0).",
        )
        unstorable.add_metric([], float(journal.unstorable_count()))
        yield unstorable

    def _keys(self) -> Iterator[Metric]:
        budget = _gauge("skillgate_key_budget_usd", "Budget of an active API key (keys with one).", ["key"])
        spent = _gauge(
            "skillgate_key_spent_usd", "Spend charged to an active API key with a budget.", ["key"]
        )
        reserved = _gauge(
            "skillgate_key_reserved_usd",
            "Held on the key by reservations and leases, not yet spent.",
            ["key"],
        )
        keys = ApiKey.objects.filter(revoked_at__isnull=True, budget_usd__isnull=False).values_list(
            "name", "prefix", "budget_usd", "spent_usd", "reserved_usd"
        )
        for name, prefix, budget_usd, spent_usd, reserved_usd in keys:
            label = [f"{name} ({prefix})"]
            budget.add_metric(label, float(budget_usd))
            spent.add_metric(label, float(spent_usd))
            reserved.add_metric(label, float(reserved_usd))
        yield from (budget, spent, reserved)

        now = timezone.now()
        leases = _gauge("skillgate_budget_leases", "Budget leases held by server processes.", ["state"])
        leases.add_metric(["live"], float(BudgetLease.objects.filter(expires_at__gte=now).count()))
        leases.add_metric(["expired"], float(BudgetLease.objects.filter(expires_at__lt=now).count()))
        yield leases
        held = _gauge("skillgate_budget_lease_held_usd", "Unspent part of the live leases of a key.", ["key"])
        rows = (
            BudgetLease.objects.filter(expires_at__gte=now)
            .values("api_key__name", "api_key__prefix")
            .annotate(held=Sum(F("amount_usd") - F("spent_usd")))
        )
        for row in rows:
            held.add_metric([f"{row['api_key__name']} ({row['api_key__prefix']})"], float(row["held"] or 0))
        yield held

    def _jobs(self) -> Iterator[Metric]:
        yield _counts(
            _gauge("skillgate_training_runs", "Training runs by kind and status.", ["kind", "status"]),
            TrainingRun.objects.values("kind", "status").annotate(n=Count("id")),
            ["kind", "status"],
            {"kind": _values(TrainingRun.Kind), "status": _values(TrainingRun.Status)},
        )
        yield _counts(
            _gauge("skillgate_cycles", "Learning cycles by status and stage.", ["status", "stage"]),
            Cycle.objects.values("status", "stage").annotate(n=Count("id")),
            ["status", "stage"],
            {"status": _values(Cycle.Status), "stage": _values(Cycle.Stage)},
        )
        for model, name, what in (
            (Trajectory, "skillgate_trajectories", "Diagnosis runs"),
            (ActionRequest, "skillgate_action_requests", "Proposed actions"),
            (Incident, "skillgate_incidents", "Incidents"),
        ):
            yield _counts(
                _gauge(name, f"{what} by status.", ["status"]),
                model.objects.values("status").annotate(n=Count("id")),
                ["status"],
                {"status": _values(model.Status)},
            )

    def _training(self) -> Iterator[Metric]:
        labels = ["run", "adapter", "kind"]
        step = _gauge("skillgate_training_step", "Step a running training run reached.", labels)
        total = _gauge("skillgate_training_total_steps", "Steps a running training run will take.", labels)
        loss = _gauge("skillgate_training_loss", "Last loss a running training run reported.", labels)
        reward = _gauge("skillgate_training_reward", "Last mean reward a running GRPO run reported.", labels)
        running = TrainingRun.objects.filter(status=TrainingRun.Status.RUNNING).values_list(
            "id", "adapter__name", "kind", "step", "total_steps", "progress"
        )
        for run_id, adapter, kind, run_step, run_total, progress in running:
            label = [str(run_id), adapter, kind]
            step.add_metric(label, float(run_step))
            total.add_metric(label, float(run_total))
            for family, field in ((loss, "loss"), (reward, "reward")):
                value = _last_number(progress, field)
                if value is not None:
                    family.add_metric(label, value)
        yield from (step, total, loss, reward)

    def _adapters(self) -> Iterator[Metric]:
        yield _counts(
            _gauge("skillgate_adapters", "Adapters by task profile and status.", ["profile", "status"]),
            (
                {"profile": row["profile__name"], "status": row["status"], "n": row["n"]}
                for row in Adapter.objects.values("profile__name", "status").annotate(n=Count("id"))
            ),
            ["profile", "status"],
            {"profile": [], "status": []},
        )
        loaded = _gauge(
            "skillgate_adapter_loaded",
            "1 when the profile's active adapter was loaded into the student (0: admitted, not loaded).",
            ["profile", "adapter"],
        )
        for adapter in Adapter.objects.filter(status=Adapter.Status.ACTIVE).select_related("profile"):
            loaded.add_metric([adapter.profile.name, adapter.name], 1.0 if adapter.is_loaded else 0.0)
        yield loaded


def _last_number(progress: Any, field: str) -> float | None:
    """The last numeric ``field`` of a run's progress list ([{"step", "loss", "reward", ...}, ...])."""
    if not isinstance(progress, list):
        return None
    for entry in reversed(progress):
        value = entry.get(field) if isinstance(entry, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def configured_queues() -> list[str]:
    """Every queue the settings send tasks to (an empty name is Celery's default queue)."""
    default = settings.CELERY_TASK_DEFAULT_QUEUE
    learning = training_conf.get()
    names = [
        default,
        learning.training.queue,
        learning.cycle.queue,
        learning.evolver.queue,
        diagnostics_conf.get().agent.queue,
    ]
    return sorted({name or default for name in names})


class QueueDepthCollector(Collector):
    """Messages waiting on each configured queue, from the broker (Redis: the queue's lists; the local
    filesystem transport: its message files). ``url``: another broker than the configured one."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url

    def collect(self) -> Iterator[Metric]:
        depth = _gauge("skillgate_queue_depth", "Messages waiting on a Celery queue.", ["queue"])
        timeout = conf.get().metrics.broker_timeout_s
        with current_app.connection_for_read(self.url, connect_timeout=timeout) as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
            channel = conn.default_channel
            for queue in configured_queues():
                try:
                    waiting = channel.queue_declare(queue=queue, passive=True).message_count
                except ChannelError:  # Redis keeps no list for an empty queue
                    waiting = 0
                depth.add_metric([queue], float(waiting))
        yield depth
