"""The lab's files on disk: its state (desired worker count, supervisord pid) and the known-good
config of every service."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lab.config import LabConfig


def read_state(config: LabConfig) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(config.state_path.read_text())
        return data
    except (OSError, json.JSONDecodeError):
        return {}


def write_state(config: LabConfig, **changes: Any) -> dict[str, Any]:
    state = {**read_state(config), **changes}
    write_json_atomic(config.state_path, state)
    return state


def desired_workers(config: LabConfig) -> int:
    return int(read_state(config).get("workers", config.workers))


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def known_good_configs(config: LabConfig) -> dict[str, dict[str, Any]]:
    store = {"store_host": "127.0.0.1", "store_port": config.store_port}
    return {
        "api": {
            **store,
            "request_timeout_s": 2.0,
            "cache_enabled": True,
            "db_path": str(config.data_dir / "items.db"),
            "db_latency_ms": 150,
            "slow_request_ms": 100,
            "log_level": "INFO",
        },
        "web": {
            "api_url": f"http://127.0.0.1:{config.api_port}",
            "api_timeout_s": 3.0,
            "slow_request_ms": 200,
        },
        "worker": {
            **store,
            "spool_dir": str(config.spool_dir),
            "spool_quota_bytes": config.spool_quota_bytes,
            "batch_size": 16,
            "memory_limit_mb": config.worker_memory_mb,
            "job_cost_ms": 20,
            "keep_results": 200,
        },
        "loadgen": {
            "web_url": f"http://127.0.0.1:{config.web_port}",
            "rate_per_s": config.loadgen_rate,
            "job_every": 3,
        },
    }


def read_config(config: LabConfig, service: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(config.config_path(service).read_text())
    return data


def write_config(config: LabConfig, service: str, data: dict[str, Any]) -> None:
    write_json_atomic(config.config_path(service), data)
