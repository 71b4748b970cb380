"""A real Prometheus (Debian's ``prometheus`` package) scraping the local lab.

``scrape_config`` writes the configuration for a lab (its api and web services and each worker's
metrics port) with the lab's alert rules (``infra/prometheus/lab-rules.yml``); ``PrometheusServer``
runs the binary on it in its own process group, waits until it is ready and stops it. The agent reaches
it like any Prometheus: set SKILLGATE_PROMETHEUS_URL to its URL and use the ``prometheus`` environment
(e.g. ``local+prometheus``).

Nothing here is needed by the agent; without the binary the lab runs as before.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from lab.config import REPO_ROOT, LabConfig
from lab.daemon import ReadyDaemon

RULES = REPO_ROOT / "infra" / "prometheus" / "lab-rules.yml"
DEFAULT_PORT_OFFSET = 90  # the lab's Prometheus listens on port_base + 90 unless told otherwise


def binary() -> str | None:
    """The prometheus binary on PATH (Debian: /usr/bin/prometheus), or None."""
    return shutil.which("prometheus")


def lab_targets(config: LabConfig) -> dict[str, list[str]]:
    """Scrape job -> host:port of each lab process that serves /metrics."""
    return {
        "api": [f"127.0.0.1:{config.api_port}"],
        "web": [f"127.0.0.1:{config.web_port}"],
        "worker": [f"127.0.0.1:{config.worker_port_base + i}" for i in range(config.workers)],
    }


def scrape_config(
    targets: dict[str, list[str]],
    *,
    interval_s: float = 5.0,
    rules: list[Path] | None = None,
    alertmanagers: list[str] | None = None,
) -> dict[str, Any]:
    """A prometheus.yml: one job per entry of ``targets`` (``service`` label = the job), the rules, and
    the Alertmanagers (host:port) that firing alerts are sent to."""
    interval = f"{interval_s:g}s"
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in (rules if rules is not None else [RULES])],
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": "/metrics",
                "static_configs": [{"targets": hosts, "labels": {"service": job}}],
            }
            for job, hosts in targets.items()
        ],
    }
    if alertmanagers:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": alertmanagers}]}]}
    return config


class PrometheusServer(ReadyDaemon):
    """``prometheus`` on ``config`` (a scrape_config dict), with its data under ``workdir``."""

    name = "prometheus"
    install_hint = "Debian: apt-get install -y prometheus"

    def program(self) -> str | None:
        return binary()

    def arguments(self) -> list[str]:
        return [
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address={self.host}:{self.port}",
            f"--web.external-url={self.url}",  # alerts' generatorURL links here, not to the host name
            "--storage.tsdb.retention.time=1d",
        ]


def for_lab(
    config: LabConfig,
    *,
    port: int | None = None,
    interval_s: float = 5.0,
    alertmanager: str | None = None,
) -> PrometheusServer:
    """The Prometheus of a lab: scrapes its services, evaluates its rules, keeps its data in the lab,
    and sends firing alerts to ``alertmanager`` (host:port) when given."""
    return PrometheusServer(
        scrape_config(
            lab_targets(config), interval_s=interval_s, alertmanagers=[alertmanager] if alertmanager else None
        ),
        config.root / "prometheus",
        port=port or config.port_base + DEFAULT_PORT_OFFSET,
    )
