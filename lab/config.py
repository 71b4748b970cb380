"""Where the local lab lives and how it is wired: one frozen value, from the lab's settings (lab/conf.py)."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path

from lab import conf

REPO_ROOT = Path(__file__).resolve().parents[1]
MAX_WORKERS = conf.MAX_WORKERS
# Programs in supervisord (the worker group's processes are worker_0 .. worker_N-1).
SERVICES = ("store", "api", "web", "worker", "loadgen")
CONFIGURABLE = ("api", "web", "worker", "loadgen")


@dataclass(frozen=True)
class LabConfig:
    root: Path
    port_base: int = 18300
    store: str = "auto"  # auto | redis | python
    redis_server: str = ""  # the redis-server to run; empty: the one on PATH
    workers: int = 2
    spool_quota_bytes: int = 4 * 1024 * 1024
    worker_memory_mb: int = 256
    loadgen_rate: float = 4.0
    # What health() calls healthy, and how long it waits for it.
    health_timeout_s: float = 20.0
    error_rate_max: float = 0.05
    latency_max_ms: float = 100.0
    cpu_max_percent: float = 25.0

    @classmethod
    def from_settings(cls) -> LabConfig:
        """The lab the settings describe (lab/conf.py: typed and checked at start-up)."""
        lab = conf.get()
        return cls(**{field.name: getattr(lab, field.name) for field in dataclasses.fields(cls)})

    # --- ports: store, api, web at base, base+1, base+2; worker i's metrics at base+10+i ---------
    @property
    def store_port(self) -> int:
        return self.port_base

    @property
    def api_port(self) -> int:
        return self.port_base + 1

    @property
    def web_port(self) -> int:
        return self.port_base + 2

    @property
    def worker_port_base(self) -> int:
        return self.port_base + conf.WORKER_PORT_OFFSET

    def http_port(self, service: str) -> int | None:
        return {"api": self.api_port, "web": self.web_port}.get(service)

    # --- paths -----------------------------------------------------------------------------------
    @property
    def socket_path(self) -> Path:
        return self.root / "supervisor.sock"

    @property
    def supervisord_conf(self) -> Path:
        return self.root / "supervisord.conf"

    @property
    def pidfile(self) -> Path:
        return self.root / "supervisord.pid"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def spool_dir(self) -> Path:
        return self.root / "spool"

    @property
    def releases_dir(self) -> Path:
        return self.root / "releases"

    @property
    def state_path(self) -> Path:
        return self.root / "state.json"

    @property
    def changes_path(self) -> Path:
        return self.root / "changes.jsonl"

    def config_path(self, service: str) -> Path:
        return self.config_dir / f"{service}.json"

    def redis_binary(self) -> str | None:
        """The redis-server to run, or None for the Python store."""
        if self.store == "python":
            return None
        found = self.redis_server or shutil.which("redis-server")
        if self.store == "redis" and found is None:
            raise FileNotFoundError("SKILLGATE_LAB_STORE=redis but no redis-server on PATH")
        return found
