"""Prometheus in the lab's loop: the real lab up under supervisord, a real Prometheus scraping it with the
lab's alert rules, a latency fault injected; the alert the rules raise is diagnosed (analyzers only) in
the ``local+prometheus`` environment, localized to the slow route from Prometheus' own data, and the
fix proposed. Skipped, with the reason, without the prometheus binary."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote_plus

import pytest
import yaml

from diagnostics.agent.request.subject import from_alertmanager
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.local import LocalReadToolset
from diagnostics.toolsets.prometheus import PrometheusConfig, PrometheusReadToolset
from diagnostics.toolsets.registry import build_environment
from lab.config import REPO_ROOT
from lab.faults import get_fault
from lab.prometheus import RULES, binary, for_lab
from tests.support.lab import free_port_base, local_environment_lab, wait_for_symptoms

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        binary() is None, reason="prometheus is not installed (Debian: apt-get install -y prometheus)"
    ),
]


def rule_expression(name: str) -> str:
    groups = yaml.safe_load(Path(RULES).read_text())["groups"]
    return next(" ".join(r["expr"].split()) for g in groups for r in g["rules"] if r.get("alert") == name)


def test_a_latency_alert_of_the_lab_rules_is_localized_through_prometheus(tmp_path: Path, settings) -> None:  # type: ignore[no-untyped-def]
    expr = rule_expression("LabHighRequestLatency")
    with local_environment_lab(tmp_path / "lab") as lab:
        lab.heal()
        with for_lab(lab.config, port=free_port_base() + 95, interval_s=1) as prometheus:
            settings.DIAGNOSTICS_PROMETHEUS_URL = prometheus.url
            get_fault("added_latency").inject(lab)
            wait_for_symptoms(LocalReadToolset(lab.config), "added_latency")
            toolset = PrometheusReadToolset(PrometheusConfig(url=prometheus.url, timeout_s=5))
            # On a loaded 2-core machine the rule's series can flap between the check and the agent's own
            # query (its 1-minute window); the alert is then raised and diagnosed again, at most 3 times.
            for _attempt in range(3):
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline:  # the rule's expression returns the slow series
                    firing = toolset.call("execute_prometheus_instant_query", {"query": expr})
                    if firing.ok and 'service="api"' in firing.output:
                        break
                    time.sleep(1)
                else:
                    pytest.fail(f"the latency rule never matched the api: {firing.output}")
                # The api's own series (web's, slow with it, can come first in the output).
                line = next(li for li in firing.output.splitlines() if 'service="api"' in li)
                route = line.split('route="', 1)[1].split('"', 1)[0]
                alert = from_alertmanager(
                    {
                        "labels": {"alertname": "LabHighRequestLatency", "service": "api", "route": route},
                        "annotations": {"summary": f"p95 latency of api {route} is above 100 ms"},
                        "generatorURL": f"{prometheus.url}/graph?g0.expr={quote_plus(expr)}&g0.tab=1",
                    }
                )
                outcome = investigate(
                    alert=alert,
                    environment=build_environment("local+prometheus"),
                    recorder=MemoryRecorder(),
                    mode="analyzers",
                )
                slow = [f for f in outcome.findings if f.kind == "slow_endpoint"]
                if any(f"endpoint {route} of api" in f.summary for f in slow):
                    break
        lab.heal()
    queried = [c for c in outcome.tool_calls if c["tool"] == "execute_prometheus_instant_query"]
    assert any(c["params"]["query"] == expr and c["ok"] and not c["no_data"] for c in queried), queried
    slow = [f for f in outcome.findings if f.kind == "slow_endpoint"]
    # Its callers slow down with it (web's own endpoint can rank first on a loaded machine); the api's
    # slow route must be among the findings.
    assert any(f"endpoint {route} of api" in f.summary for f in slow), [f.summary for f in outcome.findings]
    assert "api" in outcome.root_cause.lower() or "cache_enabled" in outcome.diagnosis, outcome.diagnosis
    assert [(p["action"], p["args"]) for p in outcome.proposals] == [
        ("patch_config", {"service": "api", "key": "cache_enabled", "value": True})
    ], outcome.diagnosis


def _running_with(text: str) -> list[int]:
    """Live processes whose command line mentions ``text``."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                stat = (entry / "stat").read_text()
                if stat[stat.rindex(")") + 2] != "Z":
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_stopping_lab_prometheus_with_sigterm_stops_its_server(tmp_path: Path) -> None:
    """`make run` stops its children with SIGTERM; the server in its own session must not outlive it."""
    lab_dir = tmp_path / "lab"
    env = {**os.environ, "SKILLGATE_LAB_DIR": str(lab_dir), "SKILLGATE_LAB_PORT_BASE": str(free_port_base())}
    env["PYTHONUNBUFFERED"] = "1"  # its lines arrive as written
    command = [sys.executable, "manage.py", "lab_prometheus", "--no-alertmanager", "--interval", "1"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(2)]
        assert any(line.startswith("prometheus at ") for line in lines), lines
        assert _running_with(str(lab_dir / "prometheus")), "prometheus is not running"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert "prometheus stopped" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
    assert _running_with(str(lab_dir / "prometheus")) == []
