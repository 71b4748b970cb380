"""The lab's worker: drains the job queue and writes each result into the spool folder.

Limits, set on itself at start like a container runtime would:
- RLIMIT_AS = memory_limit_mb. The prefetch buffer holds `batch_size` 1 MiB slots; when it cannot
  be allocated the worker logs the MemoryError and exits with status 137, as an OOM-killed
  container does (the memory-exhaustion fault sets a huge batch_size).
- The spool folder has a quota (spool_quota_bytes): a write that would pass it fails with ENOSPC.
  The kernel gives us no per-folder quota without root, so the worker checks the folder size
  before each write; RLIMIT_FSIZE additionally caps any single file at the quota (EFBIG).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import resource
import signal
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from lab.services.common import (
    ConfigError,
    Metrics,
    Request,
    RespClient,
    Response,
    StoreError,
    load_json_config,
    serve_http,
    setup_logging,
    start_in_thread,
)
from lab.spool import spool_usage

REQUIRED = {
    "store_host": (str,),
    "store_port": (int,),
    "spool_dir": (str,),
    "spool_quota_bytes": (int,),
    "batch_size": (int,),
    "memory_limit_mb": (int,),
    "job_cost_ms": (int, float),
    "keep_results": (int,),
}
MIB = 1024 * 1024
OOM_EXIT = 137


class Worker:
    def __init__(self, config: dict[str, Any], index: int, log: Any) -> None:
        self.config, self.index, self.log = config, index, log
        self.name = f"worker_{index}"
        self.spool = Path(config["spool_dir"])
        self.quota = int(config["spool_quota_bytes"])
        self.store = RespClient(config["store_host"], config["store_port"])
        self.metrics = Metrics(self.name)
        self.metrics.describe("lab_jobs_processed_total", "Jobs finished, by outcome.")
        self.metrics.describe("lab_job_duration_seconds", "Time to process one job.")
        self.metrics.describe("lab_spool_bytes", "Bytes used in the spool folder.")
        self.metrics.describe("lab_spool_quota_bytes", "Quota of the spool folder.")
        self.metrics.gauge_fn(
            lambda: [
                ("lab_spool_bytes", None, float(spool_usage(self.spool))),
                ("lab_spool_quota_bytes", None, float(self.quota)),
                ("lab_prefetch_buffer_bytes", None, float(len(self.buffer) * MIB)),
            ]
        )
        self.buffer: list[bytearray] = []
        self.ready = False
        self.recent: deque[bool] = deque(maxlen=3)  # True = job failed
        self.last_error = ""

    def healthz(self, _request: Request) -> Response:
        if not self.ready:
            return Response.json(503, {"status": "starting", "reason": "filling prefetch buffer"})
        try:
            self.store.command("PING")
        except StoreError as exc:
            return Response.json(503, {"status": "degraded", "reason": f"store unreachable: {exc}"})
        if len(self.recent) == self.recent.maxlen and all(self.recent):
            return Response.json(
                503, {"status": "degraded", "reason": f"recent jobs failing: {self.last_error}"}
            )
        return Response.json(200, {"status": "ok"})

    def fill_prefetch_buffer(self) -> None:
        batch = int(self.config["batch_size"])
        try:
            for _ in range(batch):
                self.buffer.append(bytearray(b"\x01") * MIB)  # touch the pages: RSS grows for real
                time.sleep(0.01)
        except MemoryError:
            allocated = len(self.buffer)
            self.buffer.clear()
            self.log.critical(
                "MemoryError: cannot allocate prefetch buffer for batch_size=%d (%d MiB allocated): "
                "memory limit %d MiB (RLIMIT_AS) exhausted; exiting with status %d (OOMKilled)",
                batch,
                allocated,
                self.config["memory_limit_mb"],
                OOM_EXIT,
            )
            logging_flush()
            os._exit(OOM_EXIT)
        self.ready = True
        self.log.info("prefetch buffer ready (%d MiB)", len(self.buffer))

    def run_forever(self) -> None:
        while True:
            try:
                raw = self.store.command("RPOP", "jobs")
            except StoreError as exc:
                self.log.error("store unavailable while polling the queue: %s", exc)
                time.sleep(1.0)
                continue
            if raw is None:
                time.sleep(0.05)
                continue
            self.process(json.loads(raw))

    def process(self, job: dict[str, Any]) -> None:
        start = time.perf_counter()
        time.sleep(float(self.config["job_cost_ms"]) / 1000)  # the work itself (I/O bound)
        outcome = "ok"
        try:
            self.write_result(job)
            self.store.command("SET", f"job:{job['id']}", "done")
        except OSError as exc:
            outcome = "error"
            self.last_error = str(exc)
            self.log.error("job %s failed: %s", job["id"], exc)
            with contextlib.suppress(StoreError):
                self.store.command("SET", f"job:{job['id']}", f"failed: {exc}")
        except StoreError as exc:
            outcome = "error"
            self.last_error = str(exc)
            self.log.error("job %s: store unavailable: %s", job["id"], exc)
        self.recent.append(outcome == "error")
        self.metrics.inc("lab_jobs_processed_total", {"outcome": outcome})
        self.metrics.observe("lab_job_duration_seconds", time.perf_counter() - start)

    def write_result(self, job: dict[str, Any]) -> None:
        result = {"id": job["id"], "worker": self.name, "done_at": time.time(), "payload": job.get("payload")}
        data = json.dumps(result).encode().ljust(2048)
        path = self.spool / f"result-{job['id']}.json"
        used = spool_usage(self.spool)
        if used + len(data) > self.quota:
            raise OSError(
                errno.ENOSPC,
                f"No space left on device (spool quota {self.quota / MIB:.1f} MiB, "
                f"used {used / MIB:.2f} MiB)",
                str(path),
            )
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.rename(path)
        self.prune()

    def prune(self) -> None:
        """Keep the newest `keep_results` results (another worker may prune at the same time)."""
        results = []
        for path in self.spool.glob("result-*.json"):
            with contextlib.suppress(FileNotFoundError):
                results.append((path.stat().st_mtime, path))
        results.sort()
        for _mtime, old in results[: max(0, len(results) - int(self.config["keep_results"]))]:
            old.unlink(missing_ok=True)


def logging_flush() -> None:
    sys.stderr.flush()


def apply_limits(config: dict[str, Any]) -> None:
    limit = int(config["memory_limit_mb"]) * MIB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails with EFBIG, not a signal
    quota = int(config["spool_quota_bytes"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (quota, quota))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--port-base", type=int, required=True)
    args = parser.parse_args()
    log = setup_logging(f"worker_{args.index}")
    try:
        config = load_json_config(args.config, REQUIRED)
        if config["batch_size"] < 1 or config["memory_limit_mb"] < 32:
            raise ConfigError("batch_size must be >= 1 and memory_limit_mb >= 32")
    except ConfigError as exc:
        log.critical("FATAL config error, exiting: %s", exc)
        sys.exit(2)
    Path(config["spool_dir"]).mkdir(parents=True, exist_ok=True)
    threading.stack_size(512 * 1024)  # keep thread stacks small under RLIMIT_AS
    worker = Worker(config, args.index, log)
    port = args.port_base + args.index
    server = serve_http(port, {("GET", "/healthz"): worker.healthz}, worker.metrics, log)
    start_in_thread(server)
    apply_limits(config)
    log.info(
        "started: batch_size=%d memory_limit=%d MiB spool=%s quota=%d bytes",
        config["batch_size"],
        config["memory_limit_mb"],
        config["spool_dir"],
        config["spool_quota_bytes"],
    )
    worker.fill_prefetch_buffer()
    worker.run_forever()


if __name__ == "__main__":
    main()
