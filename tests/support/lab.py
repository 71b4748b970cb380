"""The local lab in tests: a free range of ports for it, the lab up for the `local` environment, and
what each fault looks like through the read toolset (``SYMPTOMS``), waited for until it shows."""

from __future__ import annotations

import contextlib
import os
import random
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.test import override_settings

from diagnostics.toolsets.local import LocalReadToolset
from lab.config import LabConfig
from lab.control import Lab
from lab.probes import processes_where
from tests.support.wait import wait_until

SYMPTOM_TIMEOUT = 20.0


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port_base() -> int:
    """A free range of lab ports below the kernel's ephemeral range.

    A port in the ephemeral range can be taken at any moment by the local end of an outgoing
    connection (the loadgen's, a health probe's, another test's); a lab service restarted while
    such a connection holds its port fails to bind and the lab turns FATAL. Below the range, only
    listeners compete, and the bind check here catches those.
    """
    low, _high = _ephemeral_range()
    top = max(12000, low - 40)
    for _ in range(50):
        base = random.randrange(10000, top, 20)
        ports = [base, base + 1, base + 2, *range(base + 10, base + 14)]
        try:
            for port in ports:
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range")


@contextlib.contextmanager
def local_environment_lab(root: Path) -> Iterator[Lab]:
    """The lab up under ``root``, reachable by the `local` environment: in this process through the
    DIAGNOSTICS_LAB_* settings, in a worker this process starts through the environment its settings
    read. Afterwards the lab is down and no process of its session is left."""
    config = LabConfig(root=root, port_base=free_port_base(), health_timeout_s=20)
    saved = {k: os.environ.get(k) for k in ("SKILLGATE_LAB_DIR", "SKILLGATE_LAB_PORT_BASE")}
    os.environ["SKILLGATE_LAB_DIR"] = str(config.root)
    os.environ["SKILLGATE_LAB_PORT_BASE"] = str(config.port_base)
    overridden = override_settings(
        DIAGNOSTICS_LAB_DIR=config.root, DIAGNOSTICS_LAB_PORT_BASE=config.port_base
    )
    overridden.enable()
    lab = Lab(config)
    session: int | None = None
    try:
        lab.up(timeout=40)
        session = int(config.pidfile.read_text())
        yield lab
    finally:
        lab.down()
        overridden.disable()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if session is not None:
            left = processes_where(lambda stat: stat.sid == session)
            assert left == [], f"processes left behind: {left}"
        assert not lab.is_running()


def table_row(output: str, name: str) -> list[str]:
    return next((line.split() for line in output.splitlines() if line.startswith(name + " ")), [])


def _metric(output: str, key: str) -> float:
    match = re.search(rf"\b{key}=([0-9.]+)", output)
    return float(match.group(1)) if match else 0.0


def _percent(output: str) -> float:
    match = re.search(r"\(([0-9.]+)% of quota\)", output)
    return float(match.group(1)) if match else 0.0


# What each fault looks like to the read tools: (tool, params, predicate on the output).
SYMPTOMS: dict[str, list[tuple[str, dict[str, Any], Callable[[str], bool]]]] = {
    "bad_config": [
        ("list_processes", {}, lambda out: table_row(out, "api")[1] in ("BACKOFF", "FATAL", "STARTING")),
        ("supervisor_events", {"grep": "exited: api"}, lambda out: "exit status 2; not expected" in out),
        ("tail_log", {"service": "api", "grep": "FATAL"}, lambda out: "request_timeout_s must be" in out),
    ],
    "dependency_down": [
        ("list_processes", {}, lambda out: table_row(out, "store")[1] == "STOPPED"),
        ("http_check", {"service": "api"}, lambda out: "-> 503" in out and "store unreachable" in out),
        (
            "tail_log",
            {"service": "api", "grep": "store unavailable"},
            lambda out: "Connection refused" in out,
        ),
    ],
    "memory_exhaustion": [
        ("supervisor_events", {"grep": "exited: worker"}, lambda out: "exit status 137; not expected" in out),
        (
            "tail_log",
            {"service": "worker", "grep": "MemoryError"},
            lambda out: "(RLIMIT_AS) exhausted" in out,
        ),
    ],
    "cpu_hog": [
        ("process_top", {}, lambda out: float(table_row(out, "api")[2]) > 25),
        ("tail_log", {"service": "api", "grep": "compaction"}, lambda out: "compaction thread" in out),
    ],
    "added_latency": [
        ("read_metrics", {"service": "api", "match": "cache"}, lambda out: _metric(out, "p50_ms") >= 100),
        ("read_config", {"service": "api"}, lambda out: '"cache_enabled": false' in out),
        # As many slow requests as the analyzers call a steady stream (log_signals: one is noise).
        ("tail_log", {"service": "api", "grep": "slow request"}, lambda out: out.count("/api/items/") >= 3),
    ],
    "disk_full": [
        ("disk_usage", {}, lambda out: "core.worker.dump" in out and _percent(out) >= 100),
        ("tail_log", {"service": "worker", "grep": "Errno 28"}, lambda out: "No space left on device" in out),
        ("read_metrics", {"service": "worker", "match": "outcome"}, lambda out: 'outcome="error"' in out),
    ],
    "bad_deploy": [
        ("deploy_history", {"service": "api"}, lambda out: "current release: v2" in out),
        ("tail_log", {"service": "api", "grep": "KeyError"}, lambda out: "KeyError: 'price'" in out),
        ("read_metrics", {"service": "api", "match": "errors"}, lambda out: _metric(out, "error_ratio") > 0),
    ],
    "queue_backlog": [
        ("list_processes", {}, lambda out: "worker_" not in out and "(workers configured: 0)" in out),
        (
            "read_metrics",
            {"service": "api", "match": "lab_queue_depth"},
            lambda out: float(out.strip().splitlines()[-1].split()[-1]) >= 2,
        ),
    ],
}


def wait_for_symptoms(
    reader: LocalReadToolset, fault_name: str, timeout: float = SYMPTOM_TIMEOUT
) -> list[str]:
    """Waits until each symptom of the fault shows through the read toolset; returns the evidence."""
    evidence = []
    for tool, params, predicate in SYMPTOMS[fault_name]:

        def seen(tool: str = tool, params: dict[str, Any] = params, predicate: Any = predicate) -> str:
            result = reader.call(tool, params)
            try:
                return result.output if result.ok and predicate(result.output) else ""
            except (IndexError, ValueError):  # the output is not (yet) what the predicate parses
                return ""

        what = f"{fault_name} to show through {tool} {params}"
        evidence.append(wait_until(seen, timeout=timeout, interval=0.5, what=what))
    return evidence
