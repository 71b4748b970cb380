"""The PromQL the questions package writes (diagnostics/agent/questions/promql.py), run by a real
Prometheus server (Debian's package) scraping a live exporter: the queries parse, their forms fall back as
written (a ``status`` label where ``code`` is absent, the next label when the first names nothing), and the
answers give the number Prometheus computed with its unit; a ``predict_linear`` alert's follow-up read over
a range gives the rate a volume fills at. Metric names, labels and namespaces differ from every eval case.

Skipped, with the reason, where the binaries are absent; CI installs them (apt-get install -y prometheus).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote

import pytest

from diagnostics.agent.request.subject import from_alertmanager, from_text
from diagnostics.agent.runner import MemoryRecorder, investigate
from diagnostics.toolsets.prometheus import PrometheusConfig, PrometheusReadToolset
from diagnostics.toolsets.registry import build_environment
from lab.prometheus import PrometheusServer, binary, scrape_config
from tests.diagnostics.lab.test_prometheus_real import free_port

pytestmark = pytest.mark.skipif(
    binary() is None, reason="prometheus is not installed (Debian: apt-get install -y prometheus)"
)
GI = 2**30
MI = 2**20


def _counter(elapsed: float, per_second: float) -> str:
    return f"{per_second * elapsed:.1f}"


class Exporter(BaseHTTPRequestHandler):
    """Three kinds of exporter on one port, told apart by path: an application with ``code`` (/checkout),
    one with ``status`` (/ledger), and a kubelet's container and volume metrics (/kubelet)."""

    started = time.time()

    def do_GET(self) -> None:
        elapsed = time.time() - self.started
        lines: list[str] = []
        if self.path.startswith("/checkout"):
            lines.append("# TYPE orders_http_requests_total counter")
            for code, rps in (("200", 18.0), ("503", 2.0)):
                labels = f'namespace="payments",code="{code}"'
                lines.append(f"orders_http_requests_total{{{labels}}} {_counter(elapsed, rps)}")
            lines.append("# TYPE orders_http_request_duration_seconds histogram")
            count = 20.0 * elapsed  # every request takes 0.3 s: inside the (0.25, 0.5] bucket
            for bound in ("0.1", "0.25", "0.5", "1", "+Inf"):
                inside = count if bound not in ("0.1", "0.25") else 0.0
                lines.append(
                    f'orders_http_request_duration_seconds_bucket{{namespace="payments",le="{bound}"}} '
                    f"{inside:.1f}"
                )
        elif self.path.startswith("/ledger"):
            lines.append("# TYPE bank_api_requests_total counter")
            for status, rps in (("200", 9.0), ("500", 1.0)):
                lines.append(
                    f'bank_api_requests_total{{namespace="bank",status="{status}"}} {_counter(elapsed, rps)}'
                )
        else:
            pod = 'namespace="bank",pod="ledger-5d8f9c7b6-xk2lq"'
            claim = '{namespace="search",persistentvolumeclaim="logs-indexer-0"}'
            lines += [
                "# TYPE container_memory_working_set_bytes gauge",
                f'container_memory_working_set_bytes{{{pod},container="app"}} {300 * MI}',
                f'container_memory_working_set_bytes{{{pod},container="POD"}} {1 * MI}',
                "# TYPE kubelet_volume_stats_available_bytes gauge",
                f"kubelet_volume_stats_available_bytes{claim} {40 * GI - 8 * MI * elapsed:.0f}",
                "# TYPE kubelet_volume_stats_capacity_bytes gauge",
                f"kubelet_volume_stats_capacity_bytes{claim} {200 * GI}",
            ]
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
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{exporter.server_port}"
    config = scrape_config({"checkout": [host], "ledger": [host], "kubelet": [host]}, interval_s=1, rules=[])
    for job in config["scrape_configs"]:
        job["metrics_path"] = f"/{job['job_name']}"
    server = PrometheusServer(config, tmp_path_factory.mktemp("prometheus"), port=free_port())
    with server:
        toolset = PrometheusReadToolset(PrometheusConfig(url=server.url, timeout_s=5))
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:  # enough scrapes of each job for rate() and deriv()
            result = toolset.call(
                "execute_prometheus_instant_query", {"query": "count_over_time(up[1m]) >= 6"}
            )
            if result.ok and result.output.count("=>") == 3:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"prometheus did not scrape the three jobs: {result.output}")
        yield server
    exporter.shutdown()


def _ask(server: PrometheusServer, settings: Any, question: str) -> Any:
    settings.DIAGNOSTICS_PROMETHEUS_URL = server.url
    return investigate(
        alert=from_text(question),
        environment=build_environment("prometheus"),
        recorder=MemoryRecorder(),
        mode="analyzers",
    )


def _value(line: str, after: str) -> float:
    return float(line.split(after, 1)[1].split()[0])


def test_5xx_rate_and_share_from_code_labels(prometheus: PrometheusServer, settings: Any) -> None:
    outcome = _ask(prometheus, settings, "what is the error rate of the checkout service in payments?")
    first = outcome.diagnosis.splitlines()[0]
    assert first.startswith("checkout (namespace payments) returns 5xx at "), outcome.diagnosis
    assert _value(first, "returns 5xx at ") > 0
    # 2 of every 20 requests answer 503. (Rates over 5m of a server started seconds ago are small in
    # absolute terms: rate() divides by the whole range; their ratio is exact.)
    share = next(line for line in outcome.diagnosis.splitlines() if line.startswith("That is "))
    assert float(share.split("%")[0].removeprefix("That is ")) == pytest.approx(10.0, abs=1.0)
    assert outcome.answer["shape"] == "metric" and all(c["ok"] for c in outcome.tool_calls)


def test_status_label_and_job_form(prometheus: PrometheusServer, settings: Any) -> None:
    """ledger counts under ``status``, not ``code``: the ``or`` of the query takes it."""
    outcome = _ask(
        prometheus, settings, "how many 5xx errors per second does job ledger return in namespace bank?"
    )
    line = outcome.diagnosis.splitlines()[0]
    assert line.startswith("ledger (namespace bank) returns 5xx at "), outcome.diagnosis
    assert 'job="ledger"' in outcome.tool_calls[0]["params"]["query"]
    share = next(line for line in outcome.diagnosis.splitlines() if line.startswith("That is "))
    assert float(share.split("%")[0].removeprefix("That is ")) == pytest.approx(10.0, abs=1.0)


def test_latency_quantile_from_histogram_buckets(prometheus: PrometheusServer, settings: Any) -> None:
    outcome = _ask(prometheus, settings, "what's the p90 latency of checkout according to prometheus?")
    line = outcome.diagnosis.splitlines()[0]
    assert line.startswith("The p90 latency of checkout (namespace payments) is "), outcome.diagnosis
    # histogram_quantile interpolates inside (0.25, 0.5]: 0.25 + 0.25 * 0.9
    assert _value(line, " is ") == pytest.approx(0.475, abs=0.01)


def test_memory_of_a_pod_by_its_workload_name(prometheus: PrometheusServer, settings: Any) -> None:
    outcome = _ask(prometheus, settings, "how much memory does ledger use, per prometheus?")
    line = outcome.diagnosis.splitlines()[0]
    assert line.startswith("ledger-5d8f9c7b6-xk2lq (namespace bank) uses 300Mi of memory"), outcome.diagnosis


def test_predict_linear_alert_reads_the_range_and_says_when(
    prometheus: PrometheusServer, settings: Any
) -> None:
    settings.DIAGNOSTICS_PROMETHEUS_URL = prometheus.url
    expr = "predict_linear(kubelet_volume_stats_available_bytes[1m], 4 * 3600) < 0"
    alert = from_alertmanager(
        {
            "labels": {
                "alertname": "KubePersistentVolumeFillingUp",
                "namespace": "search",
                "persistentvolumeclaim": "logs-indexer-0",
            },
            "annotations": {"summary": "PersistentVolume is filling up."},
            "generatorURL": f"{prometheus.url}/graph?g0.expr={quote(expr)}",
        }
    )
    outcome = investigate(
        alert=alert, environment=build_environment("prometheus"), recorder=MemoryRecorder(), mode="analyzers"
    )
    ranged = [c for c in outcome.tool_calls if c["tool"] == "execute_prometheus_range_query"]
    assert ranged and ranged[0]["params"]["start"] == "-1m", outcome.tool_calls
    filling = [f for f in outcome.findings if f.kind == "volume_filling" and "grows about" in f.summary]
    assert filling, (outcome.diagnosis, [(f.kind, f.summary) for f in outcome.findings], ranged)
    summary = filling[0].summary
    assert "PVC logs-indexer-0" in summary and "of 200Gi" in summary
    per_day = summary.split("grows about ", 1)[1].split("Gi a day")[0]
    assert float(per_day) == pytest.approx(8 * 86400 / 1024, rel=0.3)  # 8Mi a second
    assert "full in about" in summary and "predict_linear expects it to fill within 4 hours" in summary


def test_a_namespace_alone_is_the_subject(prometheus: PrometheusServer, settings: Any) -> None:
    outcome = _ask(prometheus, settings, "what is the 5xx rate in namespace bank?")
    line = outcome.diagnosis.splitlines()[0]
    assert line.startswith("namespace bank returns 5xx at "), outcome.diagnosis
    assert outcome.tool_calls[0]["params"]["query"].startswith("sum by (namespace) (rate(")


def test_a_count_over_a_window_uses_increase(prometheus: PrometheusServer, settings: Any) -> None:
    outcome = _ask(
        prometheus, settings, "how many 5xx did the checkout service return in the last 5 minutes?"
    )
    assert "(increase({" in outcome.tool_calls[0]["params"]["query"]
    assert outcome.diagnosis.startswith("checkout (namespace payments) returned "), outcome.diagnosis
    assert " 5xx responses in the last 5m " in outcome.diagnosis.splitlines()[0]
