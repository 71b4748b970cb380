"""Faults the local lab can inject: a small ABC and a registry by name.

Each fault says which service an operator should localize it to, what the read tools show, and
the single write action (of LocalWriteToolset) that mitigates it.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lab.config import LabConfig
from lab.control import Lab, LabError


@dataclass(frozen=True)
class Remedy:
    action: str
    args: dict[str, Any] = field(default_factory=dict)


class Fault(ABC):
    name: ClassVar[str]
    target: ClassVar[str]
    description: ClassVar[str]
    symptoms: ClassVar[str]

    @abstractmethod
    def inject(self, lab: Lab) -> str:
        """Break the running lab; return what was done."""

    @abstractmethod
    def remedy(self, config: LabConfig) -> Remedy: ...


FAULTS: dict[str, type[Fault]] = {}


def register(cls: type[Fault]) -> type[Fault]:
    FAULTS[cls.name] = cls
    return cls


def get_fault(name: str) -> Fault:
    try:
        return FAULTS[name]()
    except KeyError:
        raise LabError(f"unknown fault {name!r}; known: {', '.join(sorted(FAULTS))}") from None


def _restart_expecting_failure(lab: Lab, service: str) -> None:
    # supervisord reports the failed start; the crash loop is the point.
    with contextlib.suppress(LabError):
        lab.restart(service)


@register
class BadConfig(Fault):
    name = "bad_config"
    target = "api"
    description = "api.json gets request_timeout_s = '30s' (a string) and the api is restarted."
    symptoms = (
        "api in BACKOFF then FATAL; supervisord log 'exited: api (exit status 2; not expected)'; "
        "api.log 'FATAL config error ... request_timeout_s must be an integer or a number, got '30s''; "
        "web answers 502 (api unreachable)."
    )

    def inject(self, lab: Lab) -> str:
        lab.set_config_key("api", "request_timeout_s", "30s")
        _restart_expecting_failure(lab, "api")
        return "api config: request_timeout_s='30s'; api restarted"

    def remedy(self, config: LabConfig) -> Remedy:
        return Remedy("patch_config", {"service": "api", "key": "request_timeout_s", "value": 2.0})


@register
class DependencyDown(Fault):
    name = "dependency_down"
    target = "store"
    description = "The store (Redis) is stopped."
    symptoms = (
        "store STOPPED; api.log 'store unavailable ... Connection refused (store 127.0.0.1:PORT)'; "
        "api /healthz 503 'store unreachable'; web 502s; worker logs store errors."
    )

    def inject(self, lab: Lab) -> str:
        lab.stop("store")
        return "store stopped"

    def remedy(self, config: LabConfig) -> Remedy:
        return Remedy("restart_service", {"service": "store"})


@register
class MemoryExhaustion(Fault):
    name = "memory_exhaustion"
    target = "worker"
    description = "worker.json gets batch_size = 4096 (a 4 GiB prefetch buffer under a 256 MiB limit)."
    symptoms = (
        "worker processes restart over and over; supervisord log 'exited: worker_0 (exit status 137; "
        "not expected)'; worker log 'MemoryError ... memory limit 256 MiB (RLIMIT_AS) exhausted; exiting "
        "with status 137 (OOMKilled)'; process_resident_memory_bytes climbs before each exit; read_config "
        "shows 'changed worker.batch_size: 16 -> 4096'. Heals by reverting the change: a restart would "
        "replay the crash, and a 4 GiB buffer does not fit any allowed memory limit."
    )

    def inject(self, lab: Lab) -> str:
        lab.set_config_key("worker", "batch_size", 4096)
        _restart_expecting_failure(lab, "worker")
        return "worker config: batch_size=4096; workers restarted"

    def remedy(self, config: LabConfig) -> Remedy:
        return Remedy("patch_config", {"service": "worker", "key": "batch_size", "value": 16})


@register
class CpuHog(Fault):
    name = "cpu_hog"
    target = "api"
    description = "SIGUSR1 to the api starts a cache-compaction thread that spins forever."
    symptoms = (
        "process_top: api near 100% CPU while idle otherwise; process_cpu_seconds_total of the api "
        "grows ~1 s per second; api.log 'starting background cache compaction thread'."
    )

    def inject(self, lab: Lab) -> str:
        lab.signal("api", "USR1")
        return "api signalled (USR1): runaway compaction thread"

    def remedy(self, config: LabConfig) -> Remedy:
        return Remedy("restart_service", {"service": "api"})


@register
class AddedLatency(Fault):
    name = "added_latency"
    target = "api"
    description = "api.json gets cache_enabled = false: every item read goes to the slow database."
    symptoms = (
        "api latency p50 ~150 ms+ (lab_http_request_duration_seconds); api.log 'slow request GET "
        "/api/items/N took 15x ms' and 'cache_enabled=False' at start; read_config shows 'changed "
        "api.cache_enabled: true -> false'."
    )

    def inject(self, lab: Lab) -> str:
        lab.set_config_key("api", "cache_enabled", False)
        lab.restart("api")
        return "api config: cache_enabled=false; api restarted"

    def remedy(self, config: LabConfig) -> Remedy:
        return Remedy("patch_config", {"service": "api", "key": "cache_enabled", "value": True})


@register
class DiskFull(Fault):
    name = "disk_full"
    target = "worker"
    description = "A core dump as large as the spool quota lands in the worker's spool folder."
    symptoms = (
        "disk_usage: spool 100% of quota, core.worker.dump is the largest file; worker log "
        "'[Errno 28] No space left on device (spool quota ...)'; "
        'lab_jobs_processed_total{outcome="error"} grows; '
        "worker /healthz 503 'recent jobs failing'."
    )

    def inject(self, lab: Lab) -> str:
        path = lab.fill_spool()
        return f"wrote {path.name} ({lab.config.spool_quota_bytes} bytes) into the spool"

    def remedy(self, config: LabConfig) -> Remedy:
        return Remedy("clear_quota_folder", {"folder": "spool"})


@register
class BadDeploy(Fault):
    name = "bad_deploy"
    target = "api"
    description = "Release v2 of the api is deployed; its handler reads a field the database lacks."
    symptoms = (
        "deploy_history: v2 just deployed (previous v1); api.log tracebacks \"KeyError: 'price'\" on "
        "GET /api/items/N; api lab_http_request_errors_total climbs, error_ratio near 1 for items; web 502s."
    )

    def inject(self, lab: Lab) -> str:
        previous = lab.deploy("api", "v2", actor="ci-pipeline")
        return f"api deployed v2 (was {previous})"

    def remedy(self, config: LabConfig) -> Remedy:
        return Remedy("rollback_deploy", {"service": "api"})


@register
class QueueBacklog(Fault):
    name = "queue_backlog"
    target = "worker"
    description = "The worker group is scaled to zero: jobs are queued and never processed."
    symptoms = (
        "list_processes: no worker process, '(workers configured: 0)' and 'changed worker.workers: 2 -> 0'; "
        "api lab_queue_depth keeps growing; jobs stay 'queued'."
    )

    def inject(self, lab: Lab) -> str:
        previous = lab.scale_workers(0)
        return f"workers scaled from {previous} to 0"

    def remedy(self, config: LabConfig) -> Remedy:
        return Remedy("scale_workers", {"count": config.workers})
