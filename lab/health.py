"""Is a lab service really serving? Process state from supervisord, its health endpoint, and
live probes: error ratio and median latency of a few requests, CPU use, a job round trip."""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from dataclasses import dataclass

from lab.config import SERVICES, LabConfig
from lab.probes import cpu_percent, http_get, resp_once
from lab.spool import spool_usage
from lab.state import desired_workers
from lab.supervisor import SupervisorReader

PROBES = 10


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str
    pids: tuple[int, ...] = ()


class HealthChecker:
    def __init__(self, config: LabConfig) -> None:
        self.config = config
        self.reader = SupervisorReader(str(config.socket_path))

    def _processes(self, service: str) -> list[dict[str, object]]:
        return [p for p in self.reader.processes() if p["group"] == service]

    def check(self, service: str) -> Check:
        """One round of checks of one service (or "lab" for all of them)."""
        if service == "lab":
            results = {name: self.check(name) for name in SERVICES}
            bad = [f"{name}: {c.detail}" for name, c in results.items() if not c.ok]
            pids = tuple(pid for c in results.values() for pid in c.pids)
            return Check(not bad, "; ".join(bad) or "all services healthy", pids)
        if service not in SERVICES:
            return Check(False, f"unknown service {service!r}")
        try:
            processes = self._processes(service)
        except OSError as exc:
            return Check(False, f"supervisord unreachable: {exc}")
        expected = desired_workers(self.config) if service == "worker" else 1
        if len(processes) != expected:
            return Check(False, f"{len(processes)} {service} process(es) configured, {expected} expected")
        not_running = [f"{p['name']} is {p['statename']}" for p in processes if p["statename"] != "RUNNING"]
        if not_running:
            return Check(False, ", ".join(not_running))
        pids = tuple(int(str(p["pid"])) for p in processes)
        check = getattr(self, f"_check_{service}")(pids)
        return Check(check.ok, check.detail, pids)

    def _check_store(self, pids: tuple[int, ...]) -> Check:
        try:
            reply = resp_once("127.0.0.1", self.config.store_port, "PING")
        except OSError as exc:
            return Check(False, f"PING failed: {exc}")
        return Check(reply == "PONG", f"PING answered {reply!r}")

    def _probe(self, service: str, paths: list[str]) -> Check:
        base = f"http://127.0.0.1:{self.config.http_port(service)}"
        health = http_get(base + "/healthz")
        if health.status != 200:
            return Check(False, f"/healthz answered {health.status or 'nothing'}: {health.body[:200]}")
        replies = [http_get(base + path, timeout=5.0) for path in paths]
        errors = sum(1 for r in replies if r.status == 0 or r.status >= 500)
        ratio = errors / len(replies)
        median = statistics.median(r.ms for r in replies)
        detail = f"error ratio {ratio:.2f} over {len(replies)} probes, median latency {median:.0f} ms"
        if ratio > self.config.error_rate_max:
            sample = next(r for r in replies if r.status == 0 or r.status >= 500)
            return Check(False, f"{detail} (e.g. {sample.status}: {sample.body[:160]})")
        if median > self.config.latency_max_ms:
            return Check(False, f"{detail}, over {self.config.latency_max_ms:.0f} ms")
        return Check(True, detail)

    def _check_api(self, pids: tuple[int, ...]) -> Check:
        probe = self._probe("api", [f"/api/items/{i}" for i in range(1, PROBES + 1)])
        if not probe.ok:
            return probe
        cpu = cpu_percent(list(pids), 0.3).get(pids[0], 0.0)
        if cpu > self.config.cpu_max_percent:
            return Check(False, f"{probe.detail}; CPU {cpu:.0f}% over {self.config.cpu_max_percent:.0f}%")
        return Check(True, f"{probe.detail}; CPU {cpu:.0f}%")

    def _check_web(self, pids: tuple[int, ...]) -> Check:
        return self._probe("web", ["/"] * PROBES)

    def _check_worker(self, pids: tuple[int, ...]) -> Check:
        for index in range(len(pids)):
            reply = http_get(f"http://127.0.0.1:{self.config.worker_port_base + index}/healthz")
            if reply.status != 200:
                return Check(False, f"worker_{index} /healthz answered {reply.status}: {reply.body[:200]}")
        used = spool_usage(self.config.spool_dir)
        if used >= 0.9 * self.config.spool_quota_bytes:
            return Check(False, f"spool {used} of {self.config.spool_quota_bytes} bytes used (over 90%)")
        return self._job_round_trip()

    def _job_round_trip(self, timeout: float = 5.0) -> Check:
        api = f"http://127.0.0.1:{self.config.api_port}"
        request = urllib.request.Request(api + "/api/jobs", data=b'{"probe": true}', method="POST")
        try:
            with urllib.request.urlopen(request, timeout=3) as response:
                job_id = json.loads(response.read())["id"]
        except OSError as exc:
            return Check(False, f"could not queue a probe job through the api: {exc}")
        deadline = time.monotonic() + timeout
        state = "queued"
        while time.monotonic() < deadline:
            state = json.loads(http_get(f"{api}/api/jobs/{job_id}").body or "{}").get("state", "unknown")
            if state == "done":
                return Check(True, "probe job processed")
            if state.startswith("failed"):
                return Check(False, f"probe job {job_id} {state}")
            time.sleep(0.1)
        return Check(False, f"probe job {job_id} still {state} after {timeout:.0f}s")

    def _check_loadgen(self, pids: tuple[int, ...]) -> Check:
        return Check(True, "running")

    def wait(self, target: str, timeout: float | None = None) -> Check:
        """Poll until two consecutive rounds pass, at least a second apart, with the same pids."""
        deadline = time.monotonic() + (self.config.health_timeout_s if timeout is None else timeout)
        previous: Check | None = None
        while True:
            current = self.check(target)
            if current.ok and previous is not None and previous.ok and previous.pids == current.pids:
                return current
            if time.monotonic() >= deadline:
                if current.ok:
                    return Check(False, f"not stable: processes restarted while checking ({current.detail})")
                return current
            previous = current
            time.sleep(1.0)
