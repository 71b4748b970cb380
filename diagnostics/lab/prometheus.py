"""A real Prometheus (Debian's ``prometheus`` package) scraping the local lab.

``scrape_config`` writes the configuration for a lab (its api and web services and each worker's
metrics port) with the lab's alert rules (``infra/prometheus/lab-rules.yml``); ``PrometheusServer``
runs the binary on it in its own process group, waits until it is ready and stops it. The agent reaches
it like any Prometheus: set SKILLGATE_PROMETHEUS_URL to its URL and use the ``prometheus`` environment
(e.g. ``local+prometheus``).

Nothing here is needed by the agent; without the binary the lab runs as before.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from diagnostics.lab.config import REPO_ROOT, LabConfig

RULES = REPO_ROOT / "infra" / "prometheus" / "lab-rules.yml"
DEFAULT_PORT_OFFSET = 90  # the lab's Prometheus listens on port_base + 90 unless told otherwise


class PrometheusUnavailable(RuntimeError):
    """No prometheus binary, or it did not become ready; the message says which."""


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
    targets: dict[str, list[str]], *, interval_s: float = 5.0, rules: list[Path] | None = None
) -> dict[str, Any]:
    """A prometheus.yml: one job per entry of ``targets`` (``service`` label = the job), and rules."""
    interval = f"{interval_s:g}s"
    return {
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


@dataclass
class PrometheusServer:
    """``prometheus`` on ``config`` (a scrape_config dict), with its data under ``workdir``."""

    config: dict[str, Any]
    workdir: Path
    port: int = 9090
    host: str = "127.0.0.1"
    ready_timeout_s: float = 30.0
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> PrometheusServer:
        program = binary()
        if program is None:
            raise PrometheusUnavailable("prometheus is not installed (Debian: apt-get install -y prometheus)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "prometheus.yml"
        conf.write_text(yaml.safe_dump(self.config, sort_keys=False))
        log = (self.workdir / "prometheus.log").open("ab")
        self.process = subprocess.Popen(
            [
                program,
                f"--config.file={conf}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address={self.host}:{self.port}",
                "--storage.tsdb.retention.time=1d",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = (self.workdir / "prometheus.log").read_text(errors="replace")[-800:]
                raise PrometheusUnavailable(f"prometheus exited with {self.process.returncode}: {tail}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusUnavailable(
            f"prometheus was not ready at {self.url} after {self.ready_timeout_s:g} s"
        )

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def for_lab(config: LabConfig, *, port: int | None = None, interval_s: float = 5.0) -> PrometheusServer:
    """The Prometheus of a lab: scrapes its services, evaluates its rules, keeps its data in the lab."""
    return PrometheusServer(
        scrape_config(lab_targets(config), interval_s=interval_s),
        config.root / "prometheus",
        port=port or config.port_base + DEFAULT_PORT_OFFSET,
    )
