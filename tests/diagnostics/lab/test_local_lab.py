"""The local lab for real: services under supervisord, each fault injected, seen through the read
toolset, healed by one write action, and health() confirming the service serves again."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from diagnostics.toolsets.base import ReadToolset, WriteToolset
from diagnostics.toolsets.local import LocalReadToolset, LocalWriteToolset
from lab.config import SERVICES, LabConfig
from lab.control import Lab
from lab.faults import FAULTS, get_fault
from lab.probes import processes_where, resp_once
from lab.state import known_good_configs, read_config
from lab.supervisor import SupervisorControl, SupervisorReader
from tests.support.lab import SYMPTOMS, free_port_base, table_row, wait_for_symptoms


@pytest.fixture(scope="module")
def lab_config(tmp_path_factory: pytest.TempPathFactory) -> LabConfig:
    return LabConfig(root=tmp_path_factory.mktemp("lab"), port_base=free_port_base(), health_timeout_s=20)


@pytest.fixture(scope="module")
def lab(lab_config: LabConfig) -> Iterator[Lab]:
    lab = Lab(lab_config)
    try:
        lab.up(timeout=40)
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="module")
def reader(lab: Lab) -> LocalReadToolset:
    return LocalReadToolset(lab.config)


@pytest.fixture(scope="module")
def writer(lab: Lab) -> LocalWriteToolset:
    return LocalWriteToolset(lab.config)


def read(reader: LocalReadToolset, tool: str, **params: Any) -> str:
    result = reader.call(tool, params)
    assert result.ok, result.output
    return result.output


def test_lab_up_serves_and_every_service_exposes_metrics(lab: Lab, reader: LocalReadToolset) -> None:
    status = lab.status()
    assert all(h["ok"] for h in status["health"].values()), status["health"]
    processes = read(reader, "list_processes")
    for name in ("store", "api", "web", "worker_0", "worker_1", "loadgen"):
        assert table_row(processes, name)[1] == "RUNNING", processes
    for service in ("api", "web", "worker"):
        metrics = read(reader, "read_metrics", service=service)
        for name in ("process_resident_memory_bytes", "process_cpu_seconds_total"):
            assert name in metrics
    web = read(reader, "read_metrics", service="web")
    for name in ("lab_http_requests_total", "lab_http_request_duration_seconds_bucket", "requests="):
        assert name in web
    assert "lab_jobs_processed_total" in read(reader, "read_metrics", service="worker")
    assert "redis_version" in read(reader, "read_metrics", service="store")
    assert "current release: v1" in read(reader, "deploy_history", service="api")


@pytest.mark.parametrize("fault_name", sorted(SYMPTOMS))
def test_fault_is_visible_then_healed_by_one_action(
    fault_name: str, lab: Lab, reader: LocalReadToolset, writer: LocalWriteToolset
) -> None:
    fault = get_fault(fault_name)
    try:
        fault.inject(lab)
        wait_for_symptoms(reader, fault_name)
        remedy = fault.remedy(lab.config)
        result = writer.run(remedy.action, remedy.args)
        assert result.ok, result.output
        health = writer.health(fault.target)
        assert health.healthy, health.detail
    except BaseException:
        lab.heal()
        raise


def test_every_registered_fault_is_tested_and_has_an_allowed_remedy(writer: LocalWriteToolset) -> None:
    assert set(SYMPTOMS) == set(FAULTS)
    actions = {spec.name for spec in writer.actions()}
    for cls in FAULTS.values():
        fault = cls()
        assert fault.target in SERVICES
        assert fault.remedy(writer._lab.config).action in actions


def test_read_toolset_holds_nothing_that_can_write(
    reader: LocalReadToolset, writer: LocalWriteToolset
) -> None:
    assert isinstance(reader, ReadToolset) and not isinstance(reader, WriteToolset)
    assert not {s.name for s in reader.tools()} & {a.name for a in writer.actions()}
    public = ("name", "tools", "call", "reference_time")  # reference_time: when its data was true
    assert not [n for n in dir(reader) if not n.startswith("_") and n not in public]
    assert reader.reference_time() is None  # the lab reads live: its reads are stamped now
    for action in writer.actions():
        assert not reader.call(action.name, {"service": "api"}).ok

    # Everything reachable from the read toolset: plain values, its frozen config, a read client.
    seen: list[Any] = []
    todo: list[Any] = [reader]
    while todo:
        obj = todo.pop()
        if any(obj is s for s in seen):
            continue
        seen.append(obj)
        attrs = getattr(obj, "__dict__", {}) or {}
        slots = [getattr(obj, s) for s in getattr(type(obj), "__slots__", ()) if hasattr(obj, s)]
        todo += [v for v in [*attrs.values(), *slots] if not isinstance(v, str | int | float | bool | Path)]
    kinds = {type(o).__name__ for o in seen}
    assert kinds == {"LocalReadToolset", "LabConfig", "SupervisorReader"}, kinds
    assert not any(isinstance(o, SupervisorControl | Lab | WriteToolset) for o in seen)

    supervisor: SupervisorReader = reader._supervisor
    for method in (
        "supervisor.stopProcess",
        "supervisor.shutdown",
        "supervisor.signalProcess",
        "system.multicall",
    ):
        with pytest.raises(PermissionError):
            supervisor._call(method, "api")
    with pytest.raises(PermissionError):
        resp_once("127.0.0.1", reader._config.store_port, "FLUSHALL")


def test_read_tools_change_nothing(lab: Lab, reader: LocalReadToolset) -> None:
    before = {p["name"]: p["pid"] for p in SupervisorReader(str(lab.config.socket_path)).processes()}
    configs = {s: read_config(lab.config, s) for s in ("api", "web", "worker", "loadgen")}
    for spec in reader.tools():
        params = {"service": "api"} if "service" in spec.parameters["properties"] else {}
        assert reader.call(spec.name, params).ok, spec.name
    after = {p["name"]: p["pid"] for p in SupervisorReader(str(lab.config.socket_path)).processes()}
    assert before == after
    assert configs == {s: read_config(lab.config, s) for s in configs}


def test_write_toolset_refuses_anything_off_the_allow_list(lab: Lab, writer: LocalWriteToolset) -> None:
    refused = [
        writer.run("delete_everything", {}),
        writer.run("restart_service", {"service": "supervisord"}),
        writer.run("restart_service", {"service": "api", "force": True}),
        writer.run("patch_config", {"service": "api", "key": "db_path", "value": "/etc/passwd"}),
        writer.run("patch_config", {"service": "worker", "key": "batch_size", "value": 4096}),
        writer.run("patch_config", {"service": "web", "key": "cache_enabled", "value": True}),
        writer.run("patch_config", {"service": "api", "key": "cache_enabled", "value": "yes"}),
        writer.run("scale_workers", {"count": 0}),
        writer.run("scale_workers", {"count": 99}),
        writer.run("clear_quota_folder", {"folder": "/"}),
        writer.run("rollback_deploy", {"service": "worker"}),
    ]
    assert all(not r.ok and r.output.startswith("refused") for r in refused), [r.output for r in refused]
    assert {s: read_config(lab.config, s) for s in ("api", "web", "worker")} == {
        s: known_good_configs(lab.config)[s] for s in ("api", "web", "worker")
    }
    assert not writer.health("everything").healthy


def test_lab_command_status_inject_and_heal(lab: Lab, settings: Any, capsys: Any) -> None:
    settings.DIAGNOSTICS_LAB_DIR = lab.config.root
    settings.DIAGNOSTICS_LAB_PORT_BASE = lab.config.port_base
    call_command("lab", "status", "--json")
    status = json.loads(capsys.readouterr().out)
    assert status["running"] and status["release"] == "v1"
    call_command("lab", "faults")
    assert "rollback_deploy" in capsys.readouterr().out
    call_command("lab", "inject", "bad_deploy")
    assert "heals with rollback_deploy" in capsys.readouterr().out
    call_command("lab", "heal")
    assert "lab healed" in capsys.readouterr().out
    assert (
        json.loads((lab.config.releases_dir / "api" / "deploys.log").read_text().splitlines()[-1])["version"]
        == "v1"
    )


def test_whole_lab_healthy_after_the_faults(writer: LocalWriteToolset) -> None:
    health = writer.health("lab")
    assert health.healthy, health.detail


def test_lab_down_leaves_no_process_behind(lab: Lab) -> None:
    processes = SupervisorReader(str(lab.config.socket_path)).processes()
    groups = {os.getpgid(int(p["pid"])) for p in processes if p["pid"]}
    session = int(lab.config.pidfile.read_text())
    assert len(groups) == len(processes)  # supervisord puts each program in its own process group
    assert lab.down() == []
    left = processes_where(lambda stat: stat.pgid in groups or stat.sid == session)
    assert left == [], left
    assert not lab.is_running() and not lab.config.socket_path.exists()
