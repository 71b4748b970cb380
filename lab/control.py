"""Lifecycle and operations of the local lab: `up`, `down`, `status`, `heal`, and the operations
the write toolset and fault injection are built from (restart, scale, deploy, patch config)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import xmlrpc.client
from pathlib import Path
from typing import Any

from lab import deploy
from lab.changes import WORKERS_KEY, clear_changes, record_change
from lab.config import CONFIGURABLE, MAX_WORKERS, SERVICES, LabConfig
from lab.health import Check, HealthChecker
from lab.probes import alive, processes_where
from lab.releases import KNOWN_GOOD
from lab.services.api import seed_database
from lab.spool import clear_spool
from lab.state import (
    desired_workers,
    known_good_configs,
    read_config,
    read_state,
    write_config,
    write_state,
)
from lab.supervisor import SupervisorControl, render_conf

ACTIVE = ("RUNNING", "STARTING", "BACKOFF")


class LabError(Exception):
    """An operation on the lab failed; the message says why."""


class Lab:
    def __init__(self, config: LabConfig) -> None:
        self.config = config
        self.control = SupervisorControl(str(config.socket_path))
        self.health = HealthChecker(config)

    # --- lifecycle -------------------------------------------------------------------------------

    def is_running(self) -> bool:
        if not self.config.socket_path.exists():
            return False
        try:
            return bool(self.control.call("supervisor.getState")["statename"] == "RUNNING")
        except (OSError, xmlrpc.client.Error):
            return False

    def up(self, *, timeout: float = 30.0) -> Check:
        """Start supervisord and every service (config files are kept if present); wait until healthy."""
        if self.is_running():
            self.control.call("supervisor.startAllProcesses", True)
        else:
            self._prepare(reset=False)
            self._launch_supervisord()
        return self.wait_healthy("lab", timeout)

    def down(self, *, timeout: float = 20.0) -> list[int]:
        """Stop every service and supervisord; return pids still alive in the lab's session (none)."""
        pid = self._supervisord_pid()
        if self.is_running():
            with contextlib.suppress(OSError, xmlrpc.client.Error):
                self.control.call("supervisor.shutdown")
        deadline = time.monotonic() + timeout
        while pid and alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        leftovers = self._session_members(pid)
        for stat in leftovers:  # only processes of the lab's own session, which it started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(stat.pgid, signal.SIGKILL)
        time.sleep(0.2 if leftovers else 0)
        for path in (self.config.socket_path, self.config.pidfile):
            path.unlink(missing_ok=True)
        return [stat.pid for stat in self._session_members(pid)]

    def status(self) -> dict[str, Any]:
        if not self.is_running():
            return {"running": False, "processes": [], "health": {}}
        processes = self.control.reader().processes()
        health = {service: self.health.check(service) for service in SERVICES}
        return {
            "running": True,
            "processes": processes,
            "health": {name: {"ok": c.ok, "detail": c.detail} for name, c in health.items()},
            "release": deploy.current(self.config, "api"),
            "workers": desired_workers(self.config),
        }

    def heal(self, *, timeout: float = 40.0) -> Check:
        """Back to known-good: configs, release, worker count, empty spool; restart everything."""
        if not self.is_running():
            self._prepare(reset=True)
            self._launch_supervisord()
            return self.wait_healthy("lab", timeout)
        self._prepare(reset=True)
        # The store has no config and holds only a cache: keep it if it runs (a warm cache).
        for service in SERVICES:
            if service != "store":
                self.stop(service)
        self._apply_worker_count()
        self._rpc("supervisor.startAllProcesses", True)
        check = self.wait_healthy("lab", timeout)
        self._clear_logs()
        return check

    def _clear_logs(self) -> None:
        """Known-good includes the evidence: a fault injected after a heal is not mixed with the
        errors of the previous one (or of the heal's own restarts). Logs are opened for append, so
        truncating them under the running processes is safe."""
        for log in self.config.logs_dir.glob("*.log"):
            with log.open("r+b") as handle:
                handle.truncate(0)

    def wait_healthy(self, target: str, timeout: float) -> Check:
        check = self.health.wait(target, timeout)
        if not check.ok:
            raise LabError(f"{target} not healthy after {timeout:.0f}s: {check.detail}")
        return check

    def _prepare(self, *, reset: bool) -> None:
        cfg = self.config
        for folder in (cfg.root, cfg.logs_dir, cfg.config_dir, cfg.data_dir, cfg.spool_dir, cfg.releases_dir):
            folder.mkdir(parents=True, exist_ok=True)
        for service, data in known_good_configs(cfg).items():
            if reset or not cfg.config_path(service).exists():
                write_config(cfg, service, data)
        seed_database(str(cfg.data_dir / "items.db"))
        deploy.install_releases(cfg)
        if reset:
            if deploy.current(cfg, "api") != KNOWN_GOOD:
                deploy.switch(cfg, "api", KNOWN_GOOD, actor="lab heal (rollback to known-good)")
            clear_spool(cfg.spool_dir)
            write_state(cfg, workers=cfg.workers)
            clear_changes(cfg)  # known-good is the new baseline
        elif "workers" not in read_state(cfg):
            write_state(cfg, workers=cfg.workers)
        cfg.supervisord_conf.write_text(render_conf(cfg, workers=desired_workers(cfg)))

    def _launch_supervisord(self, timeout: float = 15.0) -> None:
        boot_log = self.config.logs_dir / "supervisord.boot.log"
        with boot_log.open("ab") as out:
            subprocess.run(
                [sys.executable, "-m", "supervisor.supervisord", "-c", str(self.config.supervisord_conf)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                check=True,
                timeout=timeout,
            )
        deadline = time.monotonic() + timeout
        while not self.is_running():
            if time.monotonic() > deadline:
                raise LabError(f"supervisord did not come up; see {boot_log}")
            time.sleep(0.1)
        write_state(self.config, supervisord_pid=self._supervisord_pid())

    def _supervisord_pid(self) -> int:
        try:
            return int(self.config.pidfile.read_text().strip())
        except (OSError, ValueError):
            return int(read_state(self.config).get("supervisord_pid", 0))

    @staticmethod
    def _session_members(sid: int) -> list[Any]:
        if not sid:
            return []
        return processes_where(lambda stat: stat.sid == sid)

    # --- operations ------------------------------------------------------------------------------

    def _rpc(self, method: str, *args: Any) -> Any:
        try:
            return self.control.call(method, *args)
        except xmlrpc.client.Fault as fault:
            raise LabError(f"supervisord refused {method}{args!r}: {fault.faultString}") from None
        except OSError as exc:
            raise LabError(f"supervisord unreachable: {exc}") from None

    def process_names(self, service: str) -> list[str]:
        return [str(p["name"]) for p in self.control.reader().processes() if p["group"] == service]

    def stop(self, service: str) -> None:
        for process in self.control.reader().processes():
            if process["group"] == service and process["statename"] in ACTIVE:
                self._rpc("supervisor.stopProcess", f"{service}:{process['name']}", True)

    def start(self, service: str) -> None:
        names = self.process_names(service)
        if not names:
            raise LabError(f"no {service} process is configured")
        for name in names:
            state = self.control.reader().process(f"{service}:{name}")["statename"]
            if state not in ACTIVE:
                self._rpc("supervisor.startProcess", f"{service}:{name}", True)

    def restart(self, service: str) -> None:
        self.stop(service)
        self.start(service)

    def signal(self, service: str, signame: str) -> None:
        for name in self.process_names(service):
            self._rpc("supervisor.signalProcess", f"{service}:{name}", signame)

    def scale_workers(self, count: int, *, actor: str = "operator") -> int:
        """Set the worker group's numprocs (supervisorctl update, done over XML-RPC)."""
        if not 0 <= count <= MAX_WORKERS:
            raise LabError(f"worker count must be between 0 and {MAX_WORKERS}")
        previous = desired_workers(self.config)
        write_state(self.config, workers=count)
        if previous != count:
            record_change(self.config, service="worker", key=WORKERS_KEY, old=previous, new=count, by=actor)
        self._apply_worker_count()
        return previous

    def _apply_worker_count(self) -> None:
        count = desired_workers(self.config)
        self.config.supervisord_conf.write_text(render_conf(self.config, workers=count))
        self._rpc("supervisor.reloadConfig")
        groups = {str(p["group"]) for p in self.control.reader().processes()}
        if "worker" in groups:
            if len(self.process_names("worker")) == count:
                return
            self._rpc("supervisor.stopProcessGroup", "worker", True)
            self._rpc("supervisor.removeProcessGroup", "worker")
        if count > 0:
            self._rpc("supervisor.addProcessGroup", "worker")

    def deploy(self, service: str, version: str, *, actor: str) -> str:
        try:
            previous = deploy.switch(self.config, service, version, actor=actor)
        except deploy.DeployError as exc:
            raise LabError(str(exc)) from None
        self.restart(service)
        return previous

    def rollback(self, service: str, *, actor: str) -> tuple[str, str]:
        try:
            target = deploy.previous_release(self.config, service)
        except deploy.DeployError as exc:
            raise LabError(str(exc)) from None
        # Marked as a rollback in the deploy log: it is the fix, not a new suspect deploy.
        return self.deploy(service, target, actor=f"{actor} (rollback)"), target

    def read_config(self, service: str) -> dict[str, Any]:
        if service not in CONFIGURABLE:
            raise LabError(f"{service} has no config file")
        return read_config(self.config, service)

    def set_config_key(self, service: str, key: str, value: Any, *, actor: str = "operator") -> Any:
        """Write one key of a service's config file and log the change; return the old value (no
        restart)."""
        data = self.read_config(service)
        old = data.get(key)
        data[key] = value
        write_config(self.config, service, data)
        if old != value:
            record_change(self.config, service=service, key=key, old=old, new=value, by=actor)
        return old

    def clear_spool(self) -> tuple[int, int]:
        return clear_spool(self.config.spool_dir)

    def fill_spool(self, name: str = "core.worker.dump") -> Path:
        """Write one file as large as the spool's quota (the disk-full fault)."""
        path = self.config.spool_dir / name
        with path.open("wb") as out:
            out.truncate(0)
            chunk = b"\0" * (1024 * 1024)
            remaining = self.config.spool_quota_bytes
            while remaining > 0:
                remaining -= out.write(chunk[: min(len(chunk), remaining)])
        return path
