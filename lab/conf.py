"""The lab's typed settings (``lab.conf.get()``): where the local lab lives, its ports and processes, and
what its health check calls healthy. Declared once here (the machinery: core/conf.py), read from the
environment by app/settings/operations.py through these declarations, checked at start-up by the app
that drives the lab (``diagnostics.apps.DiagnosticsConfig.ready()``) and turned into the lab's own value,
``lab.config.LabConfig``, by ``LabConfig.from_settings()``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from django.core.exceptions import ImproperlyConfigured

from core.conf import cached, load, setting

MAX_WORKERS = 4
STORES = ("auto", "redis", "python")
# The highest port the lab takes is the last worker's metrics port, base + 10 + workers - 1.
WORKER_PORT_OFFSET = 10
HIGHEST_PORT = 65535


@dataclass(frozen=True)
class Lab:
    """The local lab (lab/, a development and demo system the diagnosis agent is tested against): store,
    api and web listen at the first port, +1 and +2; worker i's metrics at the first port + 10 + i."""

    SECTION: ClassVar[str] = ""
    root: Path = setting(
        "DIAGNOSTICS_LAB_DIR",
        env="SKILLGATE_LAB_DIR",
        default_doc="BASE_DIR/var/lab",
        doc="The lab's folder: its supervisord, configs, releases, spool and logs.",
    )
    port_base: int = setting(
        "DIAGNOSTICS_LAB_PORT_BASE",
        env="SKILLGATE_LAB_PORT_BASE",
        default=18300,
        ge=1024,
        doc="The lab's first port (store; api +1, web +2, worker i's metrics +10+i).",
    )
    store: str = setting(
        "DIAGNOSTICS_LAB_STORE",
        env="SKILLGATE_LAB_STORE",
        default="auto",
        choices=STORES,
        doc="The lab's store: a redis-server, a small Python store, or auto (redis when one is found).",
    )
    redis_server: str = setting(
        "DIAGNOSTICS_LAB_REDIS_SERVER",
        env="SKILLGATE_LAB_REDIS_SERVER",
        default="",
        doc="The redis-server program the store runs (empty: the one on PATH).",
    )
    workers: int = setting(
        "DIAGNOSTICS_LAB_WORKERS",
        env="SKILLGATE_LAB_WORKERS",
        default=2,
        ge=1,
        le=MAX_WORKERS,
        doc="Worker processes of the lab's job queue.",
    )
    spool_quota_bytes: int = setting(
        "DIAGNOSTICS_LAB_SPOOL_QUOTA_BYTES",
        env="SKILLGATE_LAB_SPOOL_QUOTA_BYTES",
        default=4 * 1024 * 1024,
        ge=1,
        doc="The spool's quota: the disk the workers may fill before writes fail.",
    )
    worker_memory_mb: int = setting(
        "DIAGNOSTICS_LAB_WORKER_MEMORY_MB",
        env="SKILLGATE_LAB_WORKER_MEMORY_MB",
        default=256,
        ge=1,
        doc="A worker's memory limit.",
    )
    loadgen_rate: float = setting(
        "DIAGNOSTICS_LAB_LOADGEN_RATE",
        env="SKILLGATE_LAB_LOADGEN_RATE",
        default=4.0,
        gt=0,
        doc="Requests a second the load generator sends to the web service.",
    )
    health_timeout_s: float = setting(
        "DIAGNOSTICS_LAB_HEALTH_TIMEOUT_S",
        env="SKILLGATE_LAB_HEALTH_TIMEOUT_S",
        default=20.0,
        gt=0,
        doc="How long the lab's health check waits for the lab to be healthy.",
    )
    error_rate_max: float = setting(
        "DIAGNOSTICS_LAB_ERROR_RATE_MAX",
        env="SKILLGATE_LAB_ERROR_RATE_MAX",
        default=0.05,
        ge=0,
        le=1,
        doc="Healthy: at most this share of a service's probe requests failed.",
    )
    latency_max_ms: float = setting(
        "DIAGNOSTICS_LAB_LATENCY_MAX_MS",
        env="SKILLGATE_LAB_LATENCY_MAX_MS",
        default=100.0,
        gt=0,
        doc="Healthy: the probe requests' median latency is at most this.",
    )
    cpu_max_percent: float = setting(
        "DIAGNOSTICS_LAB_CPU_MAX_PERCENT",
        env="SKILLGATE_LAB_CPU_MAX_PERCENT",
        default=25.0,
        gt=0,
        doc="Healthy: the api process uses at most this much CPU (percent of one core).",
    )


GROUPS: tuple[type, ...] = (Lab,)


def build() -> Lab:
    """The group from django's settings, checked (raises ImproperlyConfigured naming a bad value)."""
    lab = load(Lab)
    highest = lab.port_base + WORKER_PORT_OFFSET + lab.workers - 1
    if highest > HIGHEST_PORT:
        raise ImproperlyConfigured(
            "SKILLGATE_LAB_PORT_BASE (settings.DIAGNOSTICS_LAB_PORT_BASE) leaves no room for the lab's "
            f"ports: with {lab.workers} workers the last is {highest}, past {HIGHEST_PORT}."
        )
    return lab


get = cached(build)


def check() -> None:
    """Start-up: built and checked now."""
    build()
