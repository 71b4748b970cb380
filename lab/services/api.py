"""The lab's API: items from a small sqlite database (cached in the store), and a job queue the
workers drain. Its handlers come from the deployed release (releases/api/current/handlers.py).

Exits with status 2 on a config it cannot run with (supervisord then shows a crash loop).
SIGUSR1 starts the "cache compaction" thread, which spins forever (the CPU-hog fault).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
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
)

REQUIRED = {
    "store_host": (str,),
    "store_port": (int,),
    "request_timeout_s": (int, float),
    "cache_enabled": (bool,),
    "db_path": (str,),
    "db_latency_ms": (int, float),
    "slow_request_ms": (int, float),
    "log_level": (str,),
}
ITEMS = [(i, f"item-{i}", 100 * i + 99) for i in range(1, 21)]


def seed_database(path: str) -> None:
    """Create the items table (idempotent); the lab calls this on `up`."""
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, name TEXT, price_cents INTEGER)"
        )
        db.executemany("INSERT OR REPLACE INTO items VALUES (?, ?, ?)", ITEMS)


def load_release(release_dir: Path) -> ModuleType:
    handlers = release_dir / "handlers.py"
    spec = importlib.util.spec_from_file_location("lab_release_handlers", handlers)
    if spec is None or spec.loader is None:
        raise ConfigError(f"no release handlers at {handlers}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Api:
    def __init__(self, config: dict[str, Any], release: ModuleType, log: Any) -> None:
        self.config, self.release, self.log = config, release, log
        timeout = float(config["request_timeout_s"])
        if timeout <= 0:
            raise ConfigError(f"request_timeout_s must be > 0, got {timeout}")
        self.store = RespClient(config["store_host"], config["store_port"], timeout=timeout)
        self.metrics = Metrics("api")
        self.metrics.describe("lab_cache_requests_total", "Item cache lookups by result (hit, miss).")
        self.metrics.describe("lab_store_errors_total", "Failed calls to the store.")
        self.metrics.describe("lab_queue_depth", "Jobs waiting in the store's queue.")
        self.metrics.describe("lab_release_info", "The deployed release.")
        self.metrics.gauge_fn(self._gauges)
        self._local = threading.local()

    def _db(self) -> sqlite3.Connection:
        if not hasattr(self._local, "db"):
            self._local.db = sqlite3.connect(f"file:{self.config['db_path']}?mode=ro", uri=True)
            self._local.db.row_factory = sqlite3.Row
        db: sqlite3.Connection = self._local.db
        return db

    def _gauges(self) -> list[tuple[str, dict[str, str] | None, float]]:
        out: list[tuple[str, dict[str, str] | None, float]] = [
            ("lab_release_info", {"version": self.release.VERSION}, 1.0),
            ("lab_cache_enabled", None, float(self.config["cache_enabled"])),
        ]
        with contextlib.suppress(StoreError):
            out.append(("lab_queue_depth", None, float(self.store.command("LLEN", "jobs"))))
        return out

    def _store_error(self, exc: StoreError, what: str) -> Response:
        self.metrics.inc("lab_store_errors_total")
        self.log.error("store unavailable while %s: %s", what, exc)
        return Response.json(503, {"error": f"store unavailable: {exc}"})

    def healthz(self, _request: Request) -> Response:
        try:
            self.store.command("PING")
        except StoreError as exc:
            return Response.json(503, {"status": "degraded", "reason": f"store unreachable: {exc}"})
        return Response.json(200, {"status": "ok", "release": self.release.VERSION})

    def item(self, request: Request) -> Response:
        try:
            item_id = int(request.path.rsplit("/", 1)[1])
        except ValueError:
            return Response.json(400, {"error": "item id must be an integer"})
        row: dict[str, Any] | None = None
        try:
            if self.config["cache_enabled"]:
                cached = self.store.command("GET", f"item:{item_id}")
                self.metrics.inc("lab_cache_requests_total", {"result": "hit" if cached else "miss"})
                row = json.loads(cached) if cached else None
            if row is None:
                row = self._query(item_id)
                if row is None:
                    return Response.json(404, {"error": f"no item {item_id}"})
                if self.config["cache_enabled"]:
                    self.store.command("SET", f"item:{item_id}", json.dumps(row))
        except StoreError as exc:
            return self._store_error(exc, f"reading item {item_id}")
        return Response.json(200, self.release.render_item(row))

    def _query(self, item_id: int) -> dict[str, Any] | None:
        # The database is tiny; a real one behind a network hop is slow. Emulated by a sleep.
        time.sleep(float(self.config["db_latency_ms"]) / 1000)
        found = self._db().execute("SELECT * FROM items WHERE id = ?", (item_id,)).fetchone()
        return dict(found) if found else None

    def create_job(self, request: Request) -> Response:
        try:
            payload = json.loads(request.body or b"{}")
        except json.JSONDecodeError:
            return Response.json(400, {"error": "body must be JSON"})
        try:
            job_id = self.store.command("INCR", "job:seq")
            self.store.command("SET", f"job:{job_id}", "queued")
            self.store.command(
                "LPUSH", "jobs", json.dumps({"id": job_id, "payload": payload, "at": time.time()})
            )
        except StoreError as exc:
            return self._store_error(exc, "queueing a job")
        return Response.json(202, {"id": job_id, "state": "queued"})

    def job(self, request: Request) -> Response:
        job_id = request.path.rsplit("/", 1)[1]
        try:
            state = self.store.command("GET", f"job:{job_id}")
        except StoreError as exc:
            return self._store_error(exc, f"reading job {job_id}")
        if state is None:
            return Response.json(404, {"error": f"no job {job_id}"})
        return Response.json(200, {"id": job_id, "state": state})

    def release_info(self, _request: Request) -> Response:
        return Response.json(200, {"version": self.release.VERSION})

    def start_compaction(self, _signum: int, _frame: Any) -> None:
        self.log.info("starting background cache compaction thread")

        def spin() -> None:
            # Bug: the compaction never finds its end marker and loops forever.
            counter = 0
            while True:
                counter = (counter + 1) % 1_000_003

        threading.Thread(target=spin, name="cache-compaction", daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--release", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    log = setup_logging("api")
    try:
        config = load_json_config(args.config, REQUIRED)
        log.setLevel(config["log_level"])
        release_dir = Path(args.release).resolve()
        release = load_release(release_dir)
        api = Api(config, release, log)
    except (ConfigError, ValueError) as exc:
        log.critical("FATAL config error, exiting: %s", exc)
        sys.exit(2)
    log.info(
        "starting release %s from %s (cache_enabled=%s)",
        release.VERSION,
        release_dir,
        config["cache_enabled"],
    )
    signal.signal(signal.SIGUSR1, api.start_compaction)
    routes = {
        ("GET", "/healthz"): api.healthz,
        ("GET", "/api/items"): api.item,
        ("POST", "/api/jobs"): api.create_job,
        ("GET", "/api/jobs"): api.job,
        ("GET", "/api/release"): api.release_info,
    }
    server = serve_http(args.port, routes, api.metrics, log, slow_ms=float(config["slow_request_ms"]))
    server.serve_forever()


if __name__ == "__main__":
    main()
