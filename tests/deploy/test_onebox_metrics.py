"""The one-machine layout (infra/onebox): /metrics sums the web processes (multiprocess mode), and the
real Prometheus scrapes it and counts every call once, whichever process answered it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from bench.support.vllm import free_port
from tests.deploy.onebox import HELLO, chat, http_get
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow


# What /metrics reads besides the processes' own counters (app/observability/views.py).
SOURCES = {"database", "broker", "replicas"}


def test_the_real_prometheus_scrapes_metrics(
    onebox: dict[str, Any], seeded: dict[str, str], tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed")
    status, text = http_get(f"{onebox['base']}/metrics")
    assert status == 401
    status, text = http_get(f"{onebox['base']}/metrics", onebox["token"])
    assert status == 200 and "skillgate_collector_up" in text
    assert list((onebox["var"] / "prometheus").glob("*.db")), "multiprocess mode: the web processes' files"

    token_file = tmp_path / "token"
    token_file.write_text(onebox["token"])
    port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "skillgate",
                        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                        "static_configs": [{"targets": [onebox["base"].removeprefix("http://")]}],
                    }
                ],
            }
        )
    )
    prometheus = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}/api/v1/query?query="

    def query(promql: str) -> list[dict[str, Any]]:
        code, body = http_get(api + urllib.parse.quote(promql))
        return json.loads(body)["data"]["result"] if code == 200 else []

    try:
        up = wait_until(lambda: query('up{job="skillgate"} == 1'), timeout=60, interval=1, what="a scrape")
        assert up

        def every_source_up() -> list[dict[str, Any]]:
            result = query("skillgate_collector_up == 1")
            return result if len(result) == len(SOURCES) else []

        sources = wait_until(
            every_source_up,
            timeout=30,
            interval=1,
            what="every source up",
        )
        assert {s["metric"]["collector"] for s in sources} == SOURCES
        depths = {s["metric"]["queue"] for s in query("skillgate_queue_depth")}
        assert depths == set(onebox["queues"].values())
        assert query("skillgate_training_runs")

        # Every call counted once, whichever web process answered it: the scrape sums their files.
        def calls() -> float:
            result = query("sum(skillgate_calls_total)")
            return float(result[0]["value"][1]) if result else 0.0

        # One call first, so the counter exists whatever ran before this test, and it is counted.
        first = calls()
        assert chat(onebox["base"], seeded["key"], HELLO).status_code == 200
        before = wait_until(
            lambda: (total := calls()) >= first + 1 and total, timeout=30, interval=1, what="the calls so far"
        )
        with ThreadPoolExecutor(max_workers=8) as pool:
            answered = list(pool.map(lambda _: chat(onebox["base"], seeded["key"], HELLO), range(20)))
        assert [r.status_code for r in answered] == [200] * 20
        wait_until(lambda: calls() == before + 20, timeout=30, interval=1, what="twenty more calls counted")
    finally:
        os.killpg(prometheus.pid, signal.SIGTERM)
        prometheus.wait(30)
