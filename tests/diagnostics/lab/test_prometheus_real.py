"""The prometheus toolset and the metric analyzers against a real Prometheus server (Debian's package)
that scrapes a real exporter over HTTP: rate(), histogram_quantile and up, and the lab's alert rules.

Skipped, with the reason, where the binaries are absent; CI installs them (apt-get install -y prometheus).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.investigation.params import TOPIC_QUERIES
from diagnostics.agent.request.subject import AlertContext, from_alertmanager
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.prometheus import PrometheusConfig, PrometheusReadToolset
from diagnostics.toolsets.registry import build_environment
from lab.config import REPO_ROOT, LabConfig
from lab.prometheus import RULES, PrometheusServer, binary, for_lab, scrape_config

pytestmark = pytest.mark.skipif(
    binary() is None, reason="prometheus is not installed (Debian: apt-get install -y prometheus)"
)
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# requests per second and the latency every request of a route takes
ROUTES = {"/api/fast": (20.0, 0.02), "/api/slow-report": (2.0, 1.8)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Exporter(BaseHTTPRequestHandler):
    """Serves /metrics: counters and a latency histogram that grow with time, like a live service."""

    started = time.time()

    def do_GET(self) -> None:
        elapsed = time.time() - self.started
        lines = ["# TYPE shop_http_requests_total counter"]
        for route, (rps, _) in ROUTES.items():
            lines.append(f'shop_http_requests_total{{route="{route}",code="200"}} {rps * elapsed:.1f}')
        lines.append("# TYPE shop_http_request_duration_seconds histogram")
        for route, (rps, seconds) in ROUTES.items():
            count = rps * elapsed
            for bound in BUCKETS:
                inside = count if seconds <= bound else 0.0
                lines.append(
                    f'shop_http_request_duration_seconds_bucket{{route="{route}",le="{bound}"}} {inside:.1f}'
                )
            lines.append(
                f'shop_http_request_duration_seconds_bucket{{route="{route}",le="+Inf"}} {count:.1f}'
            )
            lines.append(f'shop_http_request_duration_seconds_count{{route="{route}"}} {count:.1f}')
            lines.append(f'shop_http_request_duration_seconds_sum{{route="{route}"}} {count * seconds:.3f}')
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    exporter = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    thread = threading.Thread(target=exporter.serve_forever, daemon=True)
    thread.start()
    targets = {"shop": [f"127.0.0.1:{exporter.server_port}"], "ghost": [f"127.0.0.1:{free_port()}"]}
    server = PrometheusServer(
        scrape_config(targets, interval_s=1, rules=[RULES]),
        tmp_path_factory.mktemp("prometheus"),
        port=free_port(),
    )
    with server:
        toolset = PrometheusReadToolset(PrometheusConfig(url=server.url, timeout_s=5))
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:  # two scrapes of each target: rate() has data
            result = toolset.call(
                "execute_prometheus_instant_query", {"query": "count_over_time(up[1m]) >= 3"}
            )
            if result.ok and result.output.count("=>") == 2:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"prometheus did not scrape both targets: {result.output}")
        yield server
    exporter.shutdown()


def run(server: PrometheusServer, tool: str, params: dict[str, object]) -> tuple[str, list[str]]:
    toolset = PrometheusReadToolset(PrometheusConfig(url=server.url, timeout_s=5))
    result = toolset.call(tool, params)
    assert result.ok, result.output
    findings = analyze(ToolOutput(tool, params, result.output), AnalysisState(AlertContext()))
    return result.output, [f"{f.kind}: {f.summary}" for f in findings]


def test_up_names_the_target_that_is_down(prometheus: PrometheusServer) -> None:
    output, findings = run(prometheus, "execute_prometheus_instant_query", {"query": "up"})
    assert 'service="ghost"' in output and 'service="shop"' in output
    down = [f for f in findings if f.startswith("target_down")]
    assert len(down) == 1 and "ghost" in down[0] and "shop" not in down[0]
    targets, _ = run(prometheus, "list_prometheus_targets", {"health": "down"})
    assert "ghost" in targets and "shop" not in targets


def test_rate_reads_the_live_counters(prometheus: PrometheusServer) -> None:
    output, _ = run(
        prometheus,
        "execute_prometheus_instant_query",
        {"query": "sum by (route) (rate(shop_http_requests_total[30s]))"},
    )
    rates = {line.split('"')[1]: float(line.split("=> ")[1].split()[0]) for line in output.splitlines()}
    assert rates.keys() == set(ROUTES)
    # The exporter's counters grow 10 times faster on the fast route. (Absolute per-second values are
    # not compared: the exporter and Prometheus may read different clocks in a sandbox.)
    assert all(rate > 0 for rate in rates.values())
    assert rates["/api/fast"] / rates["/api/slow-report"] == pytest.approx(10.0, rel=0.1)


def test_histogram_quantile_names_the_slow_endpoint(prometheus: PrometheusServer) -> None:
    output, findings = run(
        prometheus, "execute_prometheus_instant_query", {"query": TOPIC_QUERIES["latency"]}
    )
    assert "/api/slow-report" in output and "/api/fast" in output
    slow = [f for f in findings if f.startswith("slow_endpoint")]
    assert len(slow) == 1, findings
    assert "endpoint /api/slow-report" in slow[0] and "other endpoints are fast: /api/fast" in slow[0]


def test_a_latency_alert_is_diagnosed_from_the_real_server(prometheus: PrometheusServer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DIAGNOSTICS_PROMETHEUS_URL = prometheus.url
    alert = from_alertmanager(
        {
            "labels": {"alertname": "HighRequestLatency", "service": "shop", "severity": "warning"},
            "annotations": {"summary": "p95 latency of shop is above 1s"},
        }
    )
    outcome = investigate(
        alert=alert, environment=build_environment("prometheus"), recorder=MemoryRecorder(), mode="analyzers"
    )
    assert "/api/slow-report" in outcome.root_cause, outcome.diagnosis
    queries = [c["params"].get("query") for c in outcome.tool_calls]
    assert TOPIC_QUERIES["latency"] in queries


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: prometheus)")
def test_the_lab_alert_rules_check_and_pass_their_unit_tests() -> None:
    folder = REPO_ROOT / "infra" / "prometheus"
    for command in (["check", "rules", "lab-rules.yml"], ["test", "rules", "lab-rules.test.yml"]):
        done = subprocess.run(["promtool", *command], cwd=folder, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    assert Path(RULES).is_file()


def test_the_lab_prometheus_scrapes_every_lab_service_and_loads_its_rules(tmp_path: Path) -> None:
    config = LabConfig(root=tmp_path, port_base=free_port() // 2, workers=2)
    with for_lab(config, port=free_port(), interval_s=1) as server:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # service discovery fills the target list shortly after start
            targets = httpx.get(f"{server.url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
            if len(targets) >= 4:
                break
            time.sleep(0.3)
        rules = httpx.get(f"{server.url}/api/v1/rules", timeout=5).json()["data"]["groups"]
    scraped = {(t["labels"]["service"], t["labels"]["instance"]) for t in targets}
    assert scraped == {
        ("api", f"127.0.0.1:{config.api_port}"),
        ("web", f"127.0.0.1:{config.web_port}"),
        ("worker", f"127.0.0.1:{config.worker_port_base}"),
        ("worker", f"127.0.0.1:{config.worker_port_base + 1}"),
    }
    names = {rule["name"] for group in rules for rule in group["rules"]}
    assert names == {
        "LabTargetDown",
        "LabHighErrorRate",
        "LabHighRequestLatency",
        "LabHighCPU",
        "LabSpoolFilling",
        "LabJobFailures",
        "LabServiceRestarting",
    }
