"""Parts of the lab that need no supervisord: metrics format, the Python store, the supervisord
config, releases, and the patch_config allow-list."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.support.vllm import free_port
from diagnostics.toolsets.local import LocalReadToolset
from lab import deploy
from lab.changes import clear_changes, recent_changes, render_changes
from lab.config import REPO_ROOT, LabConfig
from lab.control import Lab
from lab.probes import histogram_quantile, parse_metrics, summarize_http
from lab.services.common import ConfigError, Metrics, RespClient, StoreError, load_json_config
from lab.state import known_good_configs, write_config
from lab.supervisor import render_conf
from tests.support.wait import wait_until


def test_metrics_render_in_prometheus_text_format_and_parse_back() -> None:
    metrics = Metrics("api")
    for seconds, code in [(0.003, "200"), (0.004, "200"), (0.2, "500"), (0.3, "500")]:
        metrics.inc("lab_http_requests_total", {"route": "/api/items", "code": code})
        metrics.observe("lab_http_request_duration_seconds", seconds, {"route": "/api/items"})
        if code == "500":
            metrics.inc("lab_http_request_errors_total", {"route": "/api/items"})
    text = metrics.render()
    assert "# TYPE lab_http_request_duration_seconds histogram" in text
    assert 'lab_http_request_duration_seconds_bucket{route="/api/items",le="+Inf"} 4' in text
    assert "process_resident_memory_bytes " in text and "process_cpu_seconds_total " in text
    samples = parse_metrics(text)
    assert samples[("lab_http_requests_total", '{code="500",route="/api/items"}')] == 2
    p50 = histogram_quantile(samples, "lab_http_request_duration_seconds", 0.5)
    assert p50 is not None and 0.0 < p50 <= 0.005
    assert "error_ratio=0.500" in summarize_http(samples)


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    path = tmp_path / "api.json"
    path.write_text('{"request_timeout_s": "30s"}')
    with pytest.raises(ConfigError, match="request_timeout_s must be an integer or a number, got '30s'"):
        load_json_config(str(path), {"request_timeout_s": (int, float)})
    path.write_text('{"cache_enabled": 1}')
    with pytest.raises(ConfigError, match="cache_enabled must be a boolean"):
        load_json_config(str(path), {"cache_enabled": (bool,)})
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_json_config(str(path), {})


@pytest.fixture
def python_store() -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "lab.services.store", "--port", str(port)],
        cwd=REPO_ROOT,
        stderr=subprocess.DEVNULL,
    )
    try:

        def answers() -> bool:
            try:
                return RespClient("127.0.0.1", port).command("PING") == "PONG"
            except StoreError:
                return False

        wait_until(answers, timeout=10, what="the store to answer PING")
        yield port
    finally:
        process.terminate()
        process.wait(timeout=5)


def test_python_store_speaks_enough_redis(python_store: int) -> None:
    store = RespClient("127.0.0.1", python_store)
    assert store.command("PING") == "PONG"
    assert store.command("SET", "item:1", '{"id": 1}') == "OK"
    assert store.command("GET", "item:1") == '{"id": 1}'
    assert store.command("GET", "missing") is None
    assert store.command("INCR", "job:seq") == 1
    assert store.command("LPUSH", "jobs", "a", "b") == 2
    assert store.command("RPOP", "jobs") == "a"
    assert store.command("LLEN", "jobs") == 1
    assert "redis_version:" in store.command("INFO")
    with pytest.raises(StoreError, match="unknown command"):
        store.command("FLY")


def test_supervisord_config_has_its_own_socket_and_scales_the_worker_group(tmp_path: Path) -> None:
    config = LabConfig(root=tmp_path, port_base=30100, store="python")
    text = render_conf(config, workers=3)
    assert f"file={tmp_path}/supervisor.sock" in text and "chmod=0700" in text
    assert "numprocs=3" in text and "process_name=%(program_name)s_%(process_num)d" in text
    assert "lab.services.store --port 30100" in text
    assert "stopasgroup=true" in text and "killasgroup=true" in text
    assert "[program:worker]" not in render_conf(config, workers=0)


def test_releases_switch_atomically_and_roll_back_to_the_previous_one(tmp_path: Path) -> None:
    config = LabConfig(root=tmp_path)
    deploy.install_releases(config)
    assert deploy.current(config, "api") == "v1"
    assert deploy.releases(config, "api") == ["v1", "v2"]
    with pytest.raises(deploy.DeployError):
        deploy.previous_release(config, "api")
    assert deploy.switch(config, "api", "v2", actor="ci") == "v1"
    assert deploy.previous_release(config, "api") == "v1"
    assert (tmp_path / "releases/api/current/handlers.py").read_text().count('VERSION = "v2"') == 1
    with pytest.raises(deploy.DeployError):
        deploy.switch(config, "api", "v9", actor="ci")
    with pytest.raises(deploy.DeployError):
        deploy.current(config, "worker")


def test_config_edits_are_logged_with_who_and_when_and_shown_next_to_the_config(tmp_path: Path) -> None:
    config = LabConfig(root=tmp_path, port_base=free_port())
    for service, data in known_good_configs(config).items():
        write_config(config, service, data)
    lab = Lab(config)
    assert lab.set_config_key("worker", "batch_size", 4096, actor="alice") == 16
    assert lab.set_config_key("worker", "batch_size", 4096, actor="bob") == 4096  # no change, no entry
    lab.set_config_key("api", "cache_enabled", False)
    (change,) = recent_changes(config, "worker")
    assert (change.key, change.old, change.new, change.by) == ("batch_size", 16, 4096, "alice")
    line = render_changes(config, "worker").splitlines()[1]
    assert line.startswith("changed worker.batch_size: 16 -> 4096 at ") and line.endswith(" by alice")
    shown = LocalReadToolset(config).call("read_config", {"service": "api"}).output
    assert '"cache_enabled": false' in shown and "changed api.cache_enabled: true -> false" in shown
    clear_changes(config)
    assert recent_changes(config, "worker") == []
    assert "no recorded changes" in render_changes(config, "worker")
