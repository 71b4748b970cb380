"""Skillgate's ASGI application with counters, for ``python -m bench.gateway_overhead _counters``: served as
``python -m app.serve --app bench.gateway_overhead.counted:application``, it counts the HTTP requests, the
upstream connections the pool opens, and each cyclic-GC collection by generation with the main thread's CPU
time it took, and writes them to ``BENCH_COUNTERS_FILE`` (JSON) twice a second. ``BENCH_GC_THRESHOLD``
replaces app.asgi's GC thresholds (to compare)."""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from typing import Any

from app.asgi import application as served
from routing.call.http import pool

COUNTS: dict[str, Any] = {"calls": 0, "connections": 0, "gc_n": [0, 0, 0], "gc_cpu_s": [0.0, 0.0, 0.0]}
_started = [0.0]


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _started[0] = time.thread_time()
    else:
        COUNTS["gc_n"][info["generation"]] += 1
        COUNTS["gc_cpu_s"][info["generation"]] += time.thread_time() - _started[0]


gc.callbacks.append(_on_gc)
if os.environ.get("BENCH_GC_THRESHOLD"):  # e.g. CPython's 700,10,10: what app.asgi's setting saves
    gc.set_threshold(*(int(n) for n in os.environ["BENCH_GC_THRESHOLD"].split(",")))
_create_connection = pool._Connector._create_connection


async def _counted_connection(self: Any, *args: Any, **kwargs: Any) -> Any:
    COUNTS["connections"] += 1
    return await _create_connection(self, *args, **kwargs)


pool._Connector._create_connection = _counted_connection  # type: ignore[method-assign]


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        COUNTS["calls"] += 1
    await served(scope, receive, send)


def _write_counts(path: str) -> None:
    while True:
        time.sleep(0.5)
        with open(path + ".tmp", "w") as fh:
            json.dump(COUNTS, fh)
        os.replace(path + ".tmp", path)


if os.environ.get("BENCH_COUNTERS_FILE"):
    threading.Thread(target=_write_counts, args=(os.environ["BENCH_COUNTERS_FILE"],), daemon=True).start()
